// Package e2e holds padlock's tests in a real browser: padlockweb's page in
// headless Chromium (chromedp). It is a module of its own, never published,
// so that chromedp stays out of the root module's go.mod (docs/RELEASING.md).
package e2e

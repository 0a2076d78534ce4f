module github.com/padlock-go/padlock/e2e

go 1.26.0

require (
	github.com/chromedp/cdproto v0.160.1
	github.com/chromedp/chromedp v0.23.1
	github.com/padlock-go/padlock v0.1.0
	github.com/stretchr/testify v1.12.1
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
	github.com/go-json-experiment/json v0.0.0-20260213210345-44df1a37e875 // indirect
	github.com/google/uuid v1.0.0 // indirect
	github.com/redis/go-redis/v9 v9.0.5 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)

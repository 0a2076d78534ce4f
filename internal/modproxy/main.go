// Command modproxy writes a module proxy (the layout GOPROXY=file://DIR
// reads) that holds padlock's modules at one version, made from the files
// git tracks in the working tree: what `go get` would download once the
// release is tagged (docs/RELEASING.md). CI builds a module outside the
// repository through it, as a user would.
//
//	go run ./internal/modproxy -o DIR [-version vX.Y.Z] [module dir ...]
//
// The version, which it prints, defaults to the one go.work replaces
// padlock at (the release the nested modules require); the module dirs
// default to "." and every nested module but bench/. It uses the standard
// library only, so that the root module's dependencies stay what they are.
package main

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// rootPath is the root module's path: go.work replaces it at the release's
// version.
const rootPath = "github.com/padlock-go/padlock"

// release matches a release version: no pre-release, no pseudo-version.
var release = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+$`)

func main() {
	out := flag.String("o", "", "the directory to write the proxy into (required)")
	version := flag.String("version", "", "the version of every module (default: the one go.work replaces "+rootPath+" at)")
	flag.Parse()
	if err := run(*out, *version, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "modproxy:", err)
		os.Exit(1)
	}
}

// run writes the proxy of the modules in dirs (relative to the repository's
// top) at version into out.
func run(out, version string, dirs []string) error {
	if out == "" {
		return errors.New("-o is required")
	}
	top, err := git("rev-parse", "--show-toplevel")
	if err != nil {
		return err
	}
	top = strings.TrimSpace(top)
	if version == "" {
		if version, err = workVersion(top); err != nil {
			return err
		}
	}
	if !release.MatchString(version) {
		return fmt.Errorf("version %q is not a release (vX.Y.Z)", version)
	}
	listed, err := git("-C", top, "ls-files", "-z")
	if err != nil {
		return err
	}
	files := strings.Split(strings.TrimSuffix(listed, "\x00"), "\x00")
	roots := moduleRoots(files)
	if len(dirs) == 0 {
		for _, r := range roots {
			if r != "bench" {
				dirs = append(dirs, r)
			}
		}
	}
	for _, dir := range dirs {
		dir = path.Clean(filepath.ToSlash(dir))
		if err := writeModule(out, top, dir, version, filesOf(dir, files, roots)); err != nil {
			return fmt.Errorf("%s: %w", dir, err)
		}
	}
	fmt.Println(version)
	return nil
}

// workVersion returns the version go.work replaces the root module at.
func workVersion(top string) (string, error) {
	cmd := exec.Command("go", "work", "edit", "-json")
	cmd.Dir = top
	cmd.Env = append(os.Environ(), "GOWORK="+filepath.Join(top, "go.work"))
	b, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go work edit -json: %w", err)
	}
	var work struct {
		Replace []struct {
			Old struct{ Path, Version string }
		}
	}
	if err := json.Unmarshal(b, &work); err != nil {
		return "", fmt.Errorf("go work edit -json: %w", err)
	}
	for _, r := range work.Replace {
		if r.Old.Path == rootPath && r.Old.Version != "" {
			return r.Old.Version, nil
		}
	}
	return "", fmt.Errorf("go.work replaces no version of %s: name the release with -version", rootPath)
}

// moduleRoots returns the directories of the tracked go.mod files, "." for
// the root.
func moduleRoots(files []string) []string {
	var roots []string
	for _, f := range files {
		if path.Base(f) == "go.mod" {
			roots = append(roots, path.Dir(f))
		}
	}
	return roots
}

// filesOf returns the files of the module in dir: those under it, less
// those of a module nested in it, as the go command leaves them out.
func filesOf(dir string, files, roots []string) []string {
	var own []string
	for _, f := range files {
		if owner(f, roots) == dir {
			own = append(own, f)
		}
	}
	return own
}

// owner returns the root of the innermost module that holds file f.
func owner(f string, roots []string) string {
	best := "."
	for _, r := range roots {
		if r != "." && strings.HasPrefix(f, r+"/") && len(r) > len(best) {
			best = r
		}
	}
	return best
}

// writeModule writes the list, .info, .mod and .zip of the module in dir at
// version.
func writeModule(out, top, dir, version string, files []string) error {
	mod, err := os.ReadFile(filepath.Join(top, dir, "go.mod"))
	if err != nil {
		return err
	}
	modPath := modulePath(mod)
	if modPath == "" {
		return errors.New("go.mod names no module")
	}
	at := filepath.Join(out, filepath.FromSlash(escape(modPath)), "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		return err
	}
	info := fmt.Sprintf(`{"Version":%q,"Time":%q}`, version, time.Now().UTC().Format(time.RFC3339))
	var z bytes.Buffer
	if err := zipModule(&z, top, dir, modPath+"@"+version, files); err != nil {
		return err
	}
	for name, b := range map[string][]byte{
		"list":            []byte(version + "\n"),
		version + ".info": []byte(info),
		version + ".mod":  mod,
		version + ".zip":  z.Bytes(),
	} {
		if err := os.WriteFile(filepath.Join(at, name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// modulePath returns the path a go.mod's module line names.
func modulePath(mod []byte) string {
	for _, line := range strings.Split(string(mod), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`)
		}
	}
	return ""
}

// zipModule writes the module zip: each regular file of files (paths from
// the repository's top) as prefix/<its path in the module>.
func zipModule(w io.Writer, top, dir, prefix string, files []string) error {
	zw := zip.NewWriter(w)
	for _, f := range files {
		fi, err := os.Lstat(filepath.Join(top, f))
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted in the working tree: not in the release
		}
		if err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			continue // the go command leaves out symbolic links too
		}
		name := f
		if dir != "." {
			name = strings.TrimPrefix(f, dir+"/")
		}
		b, err := os.ReadFile(filepath.Join(top, f))
		if err != nil {
			return err
		}
		fw, err := zw.Create(prefix + "/" + name)
		if err != nil {
			return err
		}
		if _, err := fw.Write(b); err != nil {
			return err
		}
	}
	return zw.Close()
}

// escape returns a module path as a proxy names it: each upper-case letter
// as '!' and its lower case.
func escape(p string) string {
	var b strings.Builder
	for _, r := range p {
		if 'A' <= r && r <= 'Z' {
			b.WriteByte('!')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// git runs git with args and returns its output.
func git(args ...string) (string, error) {
	b, err := exec.Command("git", args...).Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return string(b), nil
}

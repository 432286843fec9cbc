package hook

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
)

// PreloadBlocker says why LD_PRELOAD will not load the device runtime into
// the container's entrypoint: a statically linked or a setuid/setgid
// program. It returns "" when the entrypoint is a dynamic executable, a
// script, or cannot be found (then nothing can be said). Paths are resolved
// inside rootfs, symlinks included, never escaping it.
func PreloadBlocker(rootfs string, args, env []string) string {
	if len(args) == 0 || rootfs == "" {
		return ""
	}
	bin, ok := findInRoot(rootfs, args[0], env)
	if !ok {
		return ""
	}
	fi, err := os.Stat(bin)
	if err != nil || !fi.Mode().IsRegular() {
		return ""
	}
	if fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
		return fmt.Sprintf("%s is setuid/setgid: the dynamic loader ignores LD_PRELOAD there", args[0])
	}
	f, err := elf.Open(bin)
	if err != nil {
		return "" // not ELF (a script): its interpreter decides
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return ""
		}
	}
	return fmt.Sprintf("%s is statically linked: LD_PRELOAD cannot load the device runtime into it", args[0])
}

// findInRoot finds the executable name (absolute, relative or looked up in
// PATH) inside rootfs and returns its host path.
func findInRoot(rootfs, name string, env []string) (string, bool) {
	if strings.Contains(name, "/") {
		p, err := resolveInRoot(rootfs, path.Join("/", name))
		return p, err == nil
	}
	pathEnv := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathEnv = v
		}
	}
	for _, dir := range strings.Split(pathEnv, ":") {
		if dir == "" {
			continue
		}
		if p, err := resolveInRoot(rootfs, path.Join("/", dir, name)); err == nil {
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
				return p, true
			}
		}
	}
	return "", false
}

var errTooManyLinks = errors.New("too many levels of symbolic links")

// resolveInRoot resolves the absolute container path p inside rootfs,
// following symlinks component by component; absolute link targets restart
// at rootfs and ".." stops at it, so the result never leaves rootfs.
func resolveInRoot(rootfs, p string) (string, error) {
	parts := strings.Split(strings.TrimPrefix(path.Clean(p), "/"), "/")
	cur := "/" // container path resolved so far (no symlinks in it)
	for hops := 0; len(parts) > 0; {
		c := parts[0]
		parts = parts[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			cur = path.Dir(cur)
			continue
		}
		next := path.Join(cur, c)
		host := rootfs + next
		fi, err := os.Lstat(host)
		if err != nil {
			return "", err
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			cur = next
			continue
		}
		if hops++; hops > 40 {
			return "", errTooManyLinks
		}
		target, err := os.Readlink(host)
		if err != nil {
			return "", err
		}
		if strings.HasPrefix(target, "/") {
			cur = "/"
		}
		parts = append(strings.Split(strings.Trim(target, "/"), "/"), parts...)
	}
	return rootfs + cur, nil
}

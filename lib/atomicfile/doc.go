// Package atomicfile replaces files so that a reader sees the old content or
// the new, never a part: write a temp file next to the target, then rename.
// Used for the tenant config the device runtime reads and for the OCI
// config.json the runc wrapper edits.
package atomicfile

// Package tenantfs is how a root process (the agent, the hooks, the CLI)
// opens files that tenants write: everything under <stateDir>/acct (the
// device runtime's usage file and wake FIFO, the probes' .status and .maps
// files). Those files are hostile: a tenant
// can put a symbolic link to a host file there, a FIFO that blocks its
// reader, a device node whose open has side effects, or a file of many GiB.
//
// Every path is opened relative to a directory fd, one component at a time
// with O_NOFOLLOW (directories with O_DIRECTORY); a file is first opened
// O_PATH (which opens nothing: no FIFO waits, no device driver runs),
// checked with fstat to be a regular file (or, for OpenFIFO, a FIFO) and
// only then reopened for reading through /proc/self/fd, so the inode
// checked is the inode read. Reads are bounded: a file bigger than the
// caller's limit is refused, not truncated. Nothing is mapped: a reader of
// a file the tenant can truncate uses pread (File.ReadAt), which returns a
// short read where a mapping would fault.
//
// Refusals wrap ErrRefused (and one of ErrSymlink, ErrNotRegular,
// ErrNotDir, ErrTooBig), so callers can tell "the tenant put something
// there that is not ours to read" from an I/O error.
package tenantfs

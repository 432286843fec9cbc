// Package board is the host side of the device runtime's priority: it
// publishes the board (docs/devrt.md) that every container maps read-only.
// Each latency-critical tenant's processes record, in their own tenant's
// usage file, until when they have work pending on the GPU; the publisher
// copies the latest such deadline to the board; best-effort launches wait
// while it lies in the future. No tenant writes anything another tenant
// reads.
//
// The usage files are the tenants' and hostile: the publisher reads them
// with pread through lib/tenantfs (no links, regular files only,
// never mapped), reads only the tenants that the host's own state (a
// Source: the tenant dirs' settings.bin) calls latency-critical, and clamps
// each deadline to now + that tenant's window as the host knows it. What a
// tenant writes about its own class is never read. A file that cannot be
// read is ignored and logged once.
//
// The publisher does not poll: it reads when a latency-critical tenant's
// wake FIFO has a byte (its work started, or went on with its deadline
// near), a quarter window before the latest deadline it read passes, and once
// per RescanInterval. The layouts and file names come from
// devrt/include/gpuext_devrt_shm.h through the generated layout_gen.go.
package board

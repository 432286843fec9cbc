// Package tenantcfg owns the device runtime's side of the injection
// contract as Go sees it: the environment variable names (env_gen.go, from
// devrt/include/gpuext_devrt_env.h) and the tenant settings file,
// settings.bin in the tenant directory, that the interposer reads instead of
// config.json (layout_gen.go, from devrt/include/gpuext_devrt_tenant.h).
// Both are generated from the C headers by gen.go; nothing is mirrored by
// hand, and `make lint` fails when the generated files drift from the
// headers. Encode is what admission writes; Decode makes the interposer's
// checks, for tests and tools. File is the tenant's config.json, its
// human-readable view, from which Settings derives settings.bin; WriteFiles
// writes both (admission, and the device runtime's tests, which so need
// nothing of the agent).
package tenantcfg

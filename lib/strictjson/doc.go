// Package strictjson decodes the JSON files gpuext reads (policy catalog,
// admin constraints, the component config) strictly: unknown fields, fields
// in another case, duplicate fields and trailing data are errors that name
// the field path, with a "did you mean" hint.
package strictjson

package policies

import "github.com/gpuext/gpuext/lib/strictjson"

// decodeStrict is strictjson.Decode with errors that wrap ErrBadCatalog.
func decodeStrict(data []byte, v any) error {
	if err := strictjson.Decode(data, v); err != nil {
		return &kindError{msg: err.Error(), kind: ErrBadCatalog}
	}
	return nil
}

package programs

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// FieldType is the type of one field of a hash view's key or value or of
// a records view's record.
type FieldType string

// Field types. Integers are little-endian; x32 and x64 are unsigned
// integers shown in hex (ids, kernel ids); string is a NUL-terminated
// char array of Size bytes; bytes is Size bytes shown in hex (padding the
// C compiler does not add, opaque data).
const (
	FieldU8     FieldType = "u8"
	FieldU16    FieldType = "u16"
	FieldU32    FieldType = "u32"
	FieldU64    FieldType = "u64"
	FieldI32    FieldType = "i32"
	FieldI64    FieldType = "i64"
	FieldX32    FieldType = "x32"
	FieldX64    FieldType = "x64"
	FieldString FieldType = "string"
	FieldBytes  FieldType = "bytes"
)

var fieldTypes = []FieldType{FieldU8, FieldU16, FieldU32, FieldU64, FieldI32, FieldI64, FieldX32, FieldX64, FieldString, FieldBytes}

// Field is one member of a key, value or record, laid out as C lays out a
// struct of such members: each at the next offset aligned to its size (1
// for string and bytes), the whole padded to its largest alignment.
type Field struct {
	Name string    `json:"name"`
	Type FieldType `json:"type"`
	// Size of a string or bytes field (1..256); integers have none.
	Size int `json:"size,omitempty"`
}

// MaxFieldBytes bounds a string or bytes field, MaxFields the fields of one layout.
const (
	MaxFieldBytes = 256
	MaxFields     = 16
)

var fieldNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,30}$`)

// numeric says whether the field is an integer the host sums over images.
func (f Field) numeric() bool { return f.Type != FieldString && f.Type != FieldBytes }

func (f Field) size() int {
	switch f.Type {
	case FieldU8:
		return 1
	case FieldU16:
		return 2
	case FieldU32, FieldI32, FieldX32:
		return 4
	case FieldU64, FieldI64, FieldX64:
		return 8
	}
	return f.Size
}

func (f Field) align() int {
	if f.numeric() {
		return f.size()
	}
	return 1
}

// checkLayout validates the fields of the view field `field` (errors name
// the field by index) and returns
// the layout's size as C gives it.
func checkLayout(field string, fields []Field) (int, error) {
	if len(fields) == 0 {
		return 0, catalogErr(field, "names no fields")
	}
	if len(fields) > MaxFields {
		return 0, catalogErr(field, "%d fields, at most %d", len(fields), MaxFields)
	}
	for i, f := range fields {
		at := fmt.Sprintf("%s[%d]", field, i)
		if !fieldNameRE.MatchString(f.Name) {
			return 0, catalogErr(at+".name", "%q must match %s", f.Name, fieldNameRE)
		}
		if slices.ContainsFunc(fields[:i], func(o Field) bool { return o.Name == f.Name }) {
			return 0, catalogErr(at+".name", "%q listed twice", f.Name)
		}
		if !slices.Contains(fieldTypes, f.Type) {
			return 0, catalogErr(at+".type", "unknown field type %q (want one of: %s)", f.Type, joinTypes())
		}
		if f.numeric() && f.Size != 0 {
			return 0, catalogErr(at+".size", "a %s field has no size", f.Type)
		}
		if !f.numeric() && (f.Size < 1 || f.Size > MaxFieldBytes) {
			return 0, catalogErr(at+".size", "%d: a %s field is 1..%d bytes", f.Size, f.Type, MaxFieldBytes)
		}
	}
	_, size := offsets(fields)
	return size, nil
}

// LayoutSize is the size of a record, key or value of fields, laid out as C does.
func LayoutSize(fields []Field) int {
	_, size := offsets(fields)
	return size
}

// offsets are the fields' offsets and the layout's size.
func offsets(fields []Field) ([]int, int) {
	offs := make([]int, len(fields))
	off, maxAlign := 0, 1
	for i, f := range fields {
		a := f.align()
		maxAlign = max(maxAlign, a)
		off = (off + a - 1) / a * a
		offs[i] = off
		off += f.size()
	}
	return offs, (off + maxAlign - 1) / maxAlign * maxAlign
}

func joinTypes() string {
	s := make([]string, len(fieldTypes))
	for i, t := range fieldTypes {
		s[i] = string(t)
	}
	return strings.Join(s, ", ")
}

// DecodeFields renders b (a key, value or record of the layout's size; the
// caller checks the size) as field name -> value: uint64 for unsigned
// integers, int64 for signed ones, a string for x32/x64 ("0x..."),
// string (up to its first NUL, non-printable bytes escaped) and bytes
// (hex).
func DecodeFields(fields []Field, b []byte) map[string]any {
	offs, _ := offsets(fields)
	le := binary.LittleEndian
	out := make(map[string]any, len(fields))
	for i, f := range fields {
		v := b[offs[i] : offs[i]+f.size()]
		switch f.Type {
		case FieldU8:
			out[f.Name] = uint64(v[0])
		case FieldU16:
			out[f.Name] = uint64(le.Uint16(v))
		case FieldU32:
			out[f.Name] = uint64(le.Uint32(v))
		case FieldU64:
			out[f.Name] = le.Uint64(v)
		case FieldI32:
			out[f.Name] = int64(int32(le.Uint32(v)))
		case FieldI64:
			out[f.Name] = int64(le.Uint64(v))
		case FieldX32:
			out[f.Name] = fmt.Sprintf("0x%08x", le.Uint32(v))
		case FieldX64:
			out[f.Name] = fmt.Sprintf("0x%016x", le.Uint64(v))
		case FieldString:
			s, _, _ := bytes.Cut(v, []byte{0})
			out[f.Name] = strings.Trim(fmt.Sprintf("%+q", s), `"`)
		case FieldBytes:
			out[f.Name] = fmt.Sprintf("%x", v)
		}
	}
	return out
}

// AddNumeric adds the counting fields of src into dst (both of fields'
// size): what summing one key's value over images is. u* and i* fields
// are added (unsigned ones saturate at their maximum, signed ones wrap as
// the device's would); x32, x64, string and bytes keep dst's.
func AddNumeric(fields []Field, dst, src []byte) {
	offs, _ := offsets(fields)
	le := binary.LittleEndian
	for i, f := range fields {
		d, s := dst[offs[i]:offs[i]+f.size()], src[offs[i]:offs[i]+f.size()]
		switch f.Type {
		case FieldU8:
			d[0] = byte(min(uint64(d[0])+uint64(s[0]), 0xff))
		case FieldU16:
			le.PutUint16(d, uint16(min(uint64(le.Uint16(d))+uint64(le.Uint16(s)), 0xffff)))
		case FieldU32:
			le.PutUint32(d, uint32(min(uint64(le.Uint32(d))+uint64(le.Uint32(s)), 0xffffffff)))
		case FieldU64:
			a, b := le.Uint64(d), le.Uint64(s)
			if a+b < a {
				le.PutUint64(d, ^uint64(0))
			} else {
				le.PutUint64(d, a+b)
			}
		case FieldI32:
			le.PutUint32(d, le.Uint32(d)+le.Uint32(s))
		case FieldI64:
			le.PutUint64(d, le.Uint64(d)+le.Uint64(s))
		}
	}
}

// Numeric returns the value of field name in b as a uint64 (signed values
// as their two's complement), and whether fields has such a numeric field.
func Numeric(fields []Field, name string, b []byte) (uint64, bool) {
	offs, _ := offsets(fields)
	le := binary.LittleEndian
	for i, f := range fields {
		if f.Name != name || !f.numeric() {
			continue
		}
		v := b[offs[i] : offs[i]+f.size()]
		switch f.size() {
		case 1:
			return uint64(v[0]), true
		case 2:
			return uint64(le.Uint16(v)), true
		case 4:
			if f.Type == FieldI32 {
				return uint64(int64(int32(le.Uint32(v)))), true
			}
			return uint64(le.Uint32(v)), true
		default:
			return le.Uint64(v), true
		}
	}
	return 0, false
}

// Summable are the unsigned numeric fields of a layout (u*): what the
// metrics sum over a hash's keys.
func Summable(fields []Field) []string {
	var out []string
	for _, f := range fields {
		switch f.Type {
		case FieldU8, FieldU16, FieldU32, FieldU64:
			out = append(out, f.Name)
		}
	}
	return out
}

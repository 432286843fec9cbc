package ptxinterp

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

type stmt struct {
	line  int
	text  string
	end   byte // ';', '{' (a header before a body), ':' (label), '}' (close)
	label string
}

// split cuts PTX text into statements, dropping comments.
func split(src string) ([]stmt, error) {
	var out []stmt
	var buf strings.Builder
	line, start := 1, 1
	inInit := false
	flush := func(end byte) {
		out = append(out, stmt{line: start, text: strings.TrimSpace(buf.String()), end: end})
		buf.Reset()
	}
	for i := 0; i < len(src); i++ {
		c := src[i]
		if c == '/' && i+1 < len(src) && src[i+1] == '/' {
			for i < len(src) && src[i] != '\n' {
				i++
			}
			i--
			continue
		}
		if c == '/' && i+1 < len(src) && src[i+1] == '*' {
			j := strings.Index(src[i+2:], "*/")
			if j < 0 {
				return nil, fmt.Errorf("line %d: unterminated comment", line)
			}
			line += strings.Count(src[i:i+2+j+2], "\n")
			i += 2 + j + 1
			continue
		}
		if c == '\n' {
			line++
		}
		if strings.TrimSpace(buf.String()) == "" {
			start = line
			// .version, .target and .address_size end at the line's end.
			if rest := src[i:]; strings.HasPrefix(rest, ".version") || strings.HasPrefix(rest, ".target") || strings.HasPrefix(rest, ".address_size") {
				j := strings.IndexByte(rest, '\n')
				if j < 0 {
					j = len(rest)
				}
				buf.Reset()
				buf.WriteString(strings.TrimSuffix(strings.TrimSpace(rest[:j]), ";"))
				flush(';')
				i += j - 1
				continue
			}
		}
		switch {
		case c == ';':
			inInit = false
			flush(';')
		case c == '{' && !inInit && strings.Contains(buf.String(), "="):
			inInit = true
			buf.WriteByte(c)
		case c == '{' && !inInit:
			if strings.TrimSpace(buf.String()) != "" {
				flush('{')
			}
			out = append(out, stmt{line: line, text: "{", end: '{'})
		case c == '}' && !inInit:
			if strings.TrimSpace(buf.String()) != "" {
				return nil, fmt.Errorf("line %d: %q before '}' lacks ';'", start, strings.TrimSpace(buf.String()))
			}
			out = append(out, stmt{line: line, text: "}", end: '}'})
		case c == ':' && !inInit && labelRe.MatchString(strings.TrimSpace(buf.String())):
			out = append(out, stmt{line: start, label: strings.TrimSpace(buf.String()), end: ':'})
			buf.Reset()
		default:
			buf.WriteByte(c)
		}
	}
	if strings.TrimSpace(buf.String()) != "" {
		return nil, fmt.Errorf("line %d: %q lacks ';'", start, strings.TrimSpace(buf.String()))
	}
	return out, nil
}

var (
	labelRe = regexp.MustCompile(`^[A-Za-z_$][A-Za-z0-9_$]*$`)
	identRe = regexp.MustCompile(`^[A-Za-z_$%][A-Za-z0-9_$]*$`)
	sigRe   = regexp.MustCompile(`^((?:\.(?:visible|extern|weak)\s+)*)\.(func|entry)\s*(?:\(([^)]*)\))?\s*([A-Za-z_$][A-Za-z0-9_$]*)\s*(?:\(([^)]*)\))?\s*(?:\.noreturn\s*)?$`)
	regDecl = regexp.MustCompile(`^\.reg\s+\.(b|u|s|pred)(\d*)\s+(.+)$`)
	varDecl = regexp.MustCompile(`^((?:\.(?:visible|extern|weak)\s+)*)\.(global|local|param|const)\s+(?:\.align\s+(\d+)\s+)?\.([bus])(\d+)\s+([A-Za-z_$][A-Za-z0-9_$]*)(?:\[(\d+)\])?\s*(?:=\s*\{([^}]*)\}|=\s*(\S+))?$`)
)

type param struct {
	name string
	size int
}

type local struct {
	name  string
	size  int
	align int
}

type function struct {
	name    string
	entry   bool
	ret     *param
	params  []param
	defined bool
	line    int
	regs    map[string]int // name -> bits (1 = .pred)
	locals  []local
	body    []*instr
	labels  map[string]int
}

type instr struct {
	line    int
	text    string
	pred    string
	predNeg bool
	op      string
	mods    []string
	args    []string
	// declaration pseudo-instruction: .param inside a body
	declParam *param
}

func parseParams(s string) ([]param, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var ps []param
	for _, p := range strings.Split(s, ",") {
		f := strings.Fields(p)
		if len(f) != 3 || f[0] != ".param" {
			return nil, fmt.Errorf("parameter %q: want .param .TYPE name", strings.TrimSpace(p))
		}
		bits, err := typeBits(strings.TrimPrefix(f[1], "."))
		if err != nil || bits < 8 {
			return nil, fmt.Errorf("parameter %q: bad type", strings.TrimSpace(p))
		}
		ps = append(ps, param{name: f[2], size: bits / 8})
	}
	return ps, nil
}

// typeBits is the width of a PTX scalar type name (u32, s8, b64, pred).
func typeBits(t string) (int, error) {
	if t == "pred" {
		return 1, nil
	}
	if len(t) < 2 || !strings.ContainsRune("bus", rune(t[0])) {
		return 0, fmt.Errorf("type %q", t)
	}
	n, err := strconv.Atoi(t[1:])
	if err != nil || (n != 8 && n != 16 && n != 32 && n != 64) {
		return 0, fmt.Errorf("type %q", t)
	}
	return n, nil
}

// splitArgs splits operands at top-level commas.
func splitArgs(s string) []string {
	var out []string
	depth := 0
	last := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(', '[', '{':
			depth++
		case ')', ']', '}':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, strings.TrimSpace(s[last:i]))
				last = i + 1
			}
		}
	}
	if t := strings.TrimSpace(s[last:]); t != "" {
		out = append(out, t)
	}
	return out
}

func (m *Machine) parse(src string) error {
	sts, err := split(src)
	if err != nil {
		return err
	}
	for i := 0; i < len(sts); i++ {
		s := sts[i]
		switch {
		case s.end == '{' && s.text == "{":
			return fmt.Errorf("line %d: '{' outside a function", s.line)
		case s.end == '}':
			return fmt.Errorf("line %d: unbalanced '}'", s.line)
		case s.end == ':':
			return fmt.Errorf("line %d: label %s outside a function", s.line, s.label)
		}
		t := s.text
		if strings.HasPrefix(t, ".version") || strings.HasPrefix(t, ".target") {
			continue
		}
		if strings.HasPrefix(t, ".address_size") {
			if strings.TrimSpace(strings.TrimPrefix(t, ".address_size")) != "64" {
				return fmt.Errorf("line %d: only .address_size 64", s.line)
			}
			continue
		}
		if mm := sigRe.FindStringSubmatch(t); mm != nil {
			f := &function{name: mm[4], entry: mm[2] == "entry", line: s.line, regs: map[string]int{}, labels: map[string]int{}}
			if mm[3] != "" {
				rp, err := parseParams(mm[3])
				if err != nil || len(rp) != 1 {
					return fmt.Errorf("line %d: return parameter: %v", s.line, err)
				}
				f.ret = &rp[0]
			}
			if f.params, err = parseParams(mm[5]); err != nil {
				return fmt.Errorf("line %d: %w", s.line, err)
			}
			if s.end == '{' {
				if i+1 >= len(sts) || sts[i+1].text != "{" {
					return fmt.Errorf("line %d: body expected", s.line)
				}
				n, err := m.parseBody(f, sts[i+2:])
				if err != nil {
					return err
				}
				i += 1 + n
				f.defined = true
			}
			if old, ok := m.funcs[f.name]; ok {
				if old.defined && f.defined {
					return fmt.Errorf("line %d: %s defined twice", s.line, f.name)
				}
				if old.defined {
					continue
				}
			}
			m.funcs[f.name] = f
			continue
		}
		if mm := varDecl.FindStringSubmatch(t); mm != nil && mm[2] == "global" {
			if err := m.addGlobal(s.line, mm); err != nil {
				return err
			}
			continue
		}
		return fmt.Errorf("line %d: unsupported directive %q", s.line, t)
	}
	return nil
}

// parseBody reads statements up to the function's closing brace and
// returns how many it consumed (the brace included).
func (m *Machine) parseBody(f *function, sts []stmt) (int, error) {
	depth := 1
	for i, s := range sts {
		switch {
		case s.end == '}':
			depth--
			if depth == 0 {
				for _, in := range f.body {
					if in.op == "bra" {
						if _, ok := f.labels[in.args[0]]; !ok {
							return 0, fmt.Errorf("line %d: unknown label %s", in.line, in.args[0])
						}
					}
				}
				return i + 1, nil
			}
			continue
		case s.end == '{':
			if s.text != "{" {
				return 0, fmt.Errorf("line %d: unexpected %q", s.line, s.text)
			}
			depth++
			continue
		case s.end == ':':
			if _, dup := f.labels[s.label]; dup {
				return 0, fmt.Errorf("line %d: label %s defined twice", s.line, s.label)
			}
			f.labels[s.label] = len(f.body)
			continue
		}
		t := s.text
		if mm := regDecl.FindStringSubmatch(t); mm != nil {
			bits := 1
			if mm[1] != "pred" {
				var err error
				if bits, err = typeBits(mm[1] + mm[2]); err != nil {
					return 0, fmt.Errorf("line %d: %w", s.line, err)
				}
			}
			for _, n := range strings.Split(mm[3], ",") {
				n = strings.TrimSpace(n)
				if lt := strings.Index(n, "<"); lt > 0 && strings.HasSuffix(n, ">") {
					cnt, err := strconv.Atoi(n[lt+1 : len(n)-1])
					if err != nil {
						return 0, fmt.Errorf("line %d: register range %q", s.line, n)
					}
					for k := 0; k < cnt; k++ {
						if err := f.declReg(fmt.Sprintf("%s%d", n[:lt], k), bits); err != nil {
							return 0, fmt.Errorf("line %d: %w", s.line, err)
						}
					}
					continue
				}
				if !identRe.MatchString(n) || n[0] != '%' {
					return 0, fmt.Errorf("line %d: register name %q", s.line, n)
				}
				if err := f.declReg(n, bits); err != nil {
					return 0, fmt.Errorf("line %d: %w", s.line, err)
				}
			}
			continue
		}
		if mm := varDecl.FindStringSubmatch(t); mm != nil {
			bits, _ := typeBits(mm[4] + mm[5])
			n := 1
			if mm[7] != "" {
				n, _ = strconv.Atoi(mm[7])
			}
			switch {
			case mm[2] == "local" && mm[8] == "" && mm[9] == "":
				al := bits / 8
				if mm[3] != "" {
					al, _ = strconv.Atoi(mm[3])
				}
				f.locals = append(f.locals, local{name: mm[6], size: n * bits / 8, align: al})
				continue
			case mm[2] == "param" && mm[7] == "" && mm[8] == "" && mm[9] == "":
				f.body = append(f.body, &instr{line: s.line, text: t, declParam: &param{name: mm[6], size: bits / 8}})
				continue
			}
			return 0, fmt.Errorf("line %d: unsupported declaration %q", s.line, t)
		}
		in, err := parseInstr(s.line, t)
		if err != nil {
			return 0, err
		}
		f.body = append(f.body, in)
	}
	return 0, fmt.Errorf("line %d: function %s has no closing brace", f.line, f.name)
}

func (f *function) declReg(name string, bits int) error {
	if old, ok := f.regs[name]; ok && old != bits {
		return fmt.Errorf("register %s redeclared with another size", name)
	}
	f.regs[name] = bits
	return nil
}

func parseInstr(line int, t string) (*instr, error) {
	in := &instr{line: line, text: t}
	if strings.HasPrefix(t, "@") {
		sp := strings.IndexAny(t, " \t")
		if sp < 0 {
			return nil, fmt.Errorf("line %d: predicate without instruction", line)
		}
		p := t[1:sp]
		if strings.HasPrefix(p, "!") {
			in.predNeg = true
			p = p[1:]
		}
		in.pred = p
		t = strings.TrimSpace(t[sp:])
	}
	op, rest, _ := strings.Cut(t, " ")
	if i := strings.IndexByte(op, '\t'); i >= 0 {
		op, rest = op[:i], op[i:]+" "+rest
	}
	parts := strings.Split(op, ".")
	in.op = parts[0]
	in.mods = parts[1:]
	in.args = splitArgs(strings.TrimSpace(rest))
	if !knownOps[in.op] {
		return nil, fmt.Errorf("line %d: unknown instruction %q", line, op)
	}
	return in, nil
}

var knownOps = map[string]bool{
	"mov": true, "cvta": true, "cvt": true, "add": true, "sub": true, "mul": true, "mad": true,
	"div": true, "rem": true, "and": true, "or": true, "xor": true, "not": true, "neg": true,
	"shl": true, "shr": true, "prmt": true, "activemask": true, "match": true, "shfl": true, "popc": true, "brev": true, "bfind": true, "membar": true, "setp": true, "bra": true, "ld": true, "st": true,
	"atom": true, "red": true, "call": true, "ret": true, "exit": true,
}

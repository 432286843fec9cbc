// Command benchplot reads the kernel lab's trace-replay benchmark
// (bench/kernel-sim.txt, written by `test/kernel/lab.sh bench`) and
//
//   - prints a markdown table: per pattern and oversubscription, each
//     policy's faults and pages migrated (in + out) relative to the default
//     (LRU eviction + tree-threshold prefetch), and the best policy;
//   - writes a PNG plot (docs/kernel-sim.png): pages migrated by the best
//     policy relative to the default, per pattern at each oversubscription.
//
// Every figure is SIMULATED (gpusim's memory model, not a GPU).  Pure Go,
// standard library only.
//
//	go run ./test/kernel/benchplot [-in bench/kernel-sim.txt] [-png docs/kernel-sim.png]
package main

import (
	"bufio"
	"flag"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
)

type run struct {
	pattern, evict, prefetch string
	oversub                  float64
	faults, in, out          uint64
}

func (r run) policy() string   { return r.evict + "+" + r.prefetch }
func (r run) migrated() uint64 { return r.in + r.out }

const defaultPolicy = "lru+tree-threshold"

var patternOrder = []string{"sequential", "strided", "random", "gemm-tiled", "hotspot"}

func parse(r io.Reader) ([]run, error) {
	var runs []run
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "BENCH ") {
			continue
		}
		kv := map[string]string{}
		for _, f := range strings.Fields(line)[1:] {
			if k, v, ok := strings.Cut(f, "="); ok {
				kv[k] = v
			}
		}
		num := func(k string) uint64 { n, _ := strconv.ParseUint(kv[k], 10, 64); return n }
		o, err := strconv.ParseFloat(kv["oversub"], 64)
		if err != nil {
			return nil, fmt.Errorf("bad line %q: %v", line, err)
		}
		runs = append(runs, run{pattern: kv["pattern"], evict: kv["evict"], prefetch: kv["prefetch"], oversub: o,
			faults: num("faults"), in: num("pages_in"), out: num("pages_out")})
	}
	return runs, sc.Err()
}

type key struct {
	pattern string
	oversub float64
}

type cell struct {
	def  run
	all  []run
	best run // fewest pages migrated (ties: fewer faults)
}

func group(runs []run) (map[key]*cell, []float64) {
	cells := map[key]*cell{}
	osSet := map[float64]bool{}
	for _, r := range runs {
		k := key{r.pattern, r.oversub}
		osSet[r.oversub] = true
		c := cells[k]
		if c == nil {
			c = &cell{}
			cells[k] = c
		}
		c.all = append(c.all, r)
		if r.policy() == defaultPolicy {
			c.def = r
		}
	}
	for _, c := range cells {
		c.best = c.all[0]
		for _, r := range c.all[1:] {
			if r.migrated() < c.best.migrated() || r.migrated() == c.best.migrated() && r.faults < c.best.faults {
				c.best = r
			}
		}
	}
	var oss []float64
	for o := range osSet {
		oss = append(oss, o)
	}
	sort.Float64s(oss)
	return cells, oss
}

func rel(a, b uint64) float64 {
	if b == 0 {
		return 1
	}
	return float64(a) / float64(b)
}

func table(w io.Writer, cells map[key]*cell, oss []float64) {
	fmt.Fprintln(w, "SIMULATED (gpusim trace replay in the kernel lab; pages migrated = pages_in + pages_out; relative to the default lru+tree-threshold)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| pattern | oversub | default faults | default pages migrated | best policy | best faults | best pages migrated | best vs default |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, p := range patternOrder {
		for _, o := range oss {
			c := cells[key{p, o}]
			if c == nil {
				continue
			}
			fmt.Fprintf(w, "| %s | %.2fx | %d | %d | %s | %d | %d | %+.0f%% |\n", p, o, c.def.faults, c.def.migrated(),
				c.best.policy(), c.best.faults, c.best.migrated(), 100*(rel(c.best.migrated(), c.def.migrated())-1))
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "All policies, pages migrated relative to the default (faults relative to the default in parentheses), SIMULATED:")
	fmt.Fprintln(w)
	var pols []string
	seen := map[string]bool{}
	for _, p := range patternOrder {
		for _, o := range oss {
			if c := cells[key{p, o}]; c != nil {
				for _, r := range c.all {
					if !seen[r.policy()] {
						seen[r.policy()] = true
						pols = append(pols, r.policy())
					}
				}
			}
		}
	}
	fmt.Fprintf(w, "| pattern | oversub | %s |\n", strings.Join(pols, " | "))
	fmt.Fprintf(w, "|---|---|%s\n", strings.Repeat("---|", len(pols)))
	for _, p := range patternOrder {
		for _, o := range oss {
			c := cells[key{p, o}]
			if c == nil {
				continue
			}
			var cols []string
			for _, pol := range pols {
				s := "-"
				for _, r := range c.all {
					if r.policy() == pol {
						s = fmt.Sprintf("%.2f (%.2f)", rel(r.migrated(), c.def.migrated()), rel(r.faults, c.def.faults))
					}
				}
				cols = append(cols, s)
			}
			fmt.Fprintf(w, "| %s | %.2fx | %s |\n", p, o, strings.Join(cols, " | "))
		}
	}
	fmt.Fprintln(w)
	for _, p := range []string{"sequential", "strided"} {
		c := cells[key{p, 1.5}]
		if c == nil {
			fmt.Fprintf(w, "Target (1.5x, %s): no data\n\n", p)
			continue
		}
		red := 100 * (1 - rel(c.best.migrated(), c.def.migrated()))
		verdict := "MET"
		if red < 30 {
			verdict = "NOT MET"
		}
		fmt.Fprintf(w, "Target (1.5x, %s, best policy migrates >= 30%% fewer pages than the default): %s -- %s migrates %d vs %d pages (%.1f%% fewer), SIMULATED\n\n",
			p, verdict, c.best.policy(), c.best.migrated(), c.def.migrated(), red)
	}
}

// --- plot: a bar chart drawn with image/draw primitives and a 5x7 font ---

var font = map[rune][7]uint8{
	'A': {14, 17, 17, 31, 17, 17, 17}, 'B': {30, 17, 17, 30, 17, 17, 30}, 'C': {14, 17, 16, 16, 16, 17, 14},
	'D': {30, 17, 17, 17, 17, 17, 30}, 'E': {31, 16, 16, 30, 16, 16, 31}, 'F': {31, 16, 16, 30, 16, 16, 16},
	'G': {14, 17, 16, 23, 17, 17, 15}, 'H': {17, 17, 17, 31, 17, 17, 17}, 'I': {14, 4, 4, 4, 4, 4, 14},
	'J': {7, 2, 2, 2, 2, 18, 12}, 'K': {17, 18, 20, 24, 20, 18, 17}, 'L': {16, 16, 16, 16, 16, 16, 31},
	'M': {17, 27, 21, 21, 17, 17, 17}, 'N': {17, 17, 25, 21, 19, 17, 17}, 'O': {14, 17, 17, 17, 17, 17, 14},
	'P': {30, 17, 17, 30, 16, 16, 16}, 'Q': {14, 17, 17, 17, 21, 18, 13}, 'R': {30, 17, 17, 30, 20, 18, 17},
	'S': {15, 16, 16, 14, 1, 1, 30}, 'T': {31, 4, 4, 4, 4, 4, 4}, 'U': {17, 17, 17, 17, 17, 17, 14},
	'V': {17, 17, 17, 17, 17, 10, 4}, 'W': {17, 17, 17, 21, 21, 21, 10}, 'X': {17, 17, 10, 4, 10, 17, 17},
	'Y': {17, 17, 10, 4, 4, 4, 4}, 'Z': {31, 1, 2, 4, 8, 16, 31},
	'0': {14, 17, 19, 21, 25, 17, 14}, '1': {4, 12, 4, 4, 4, 4, 14}, '2': {14, 17, 1, 2, 4, 8, 31},
	'3': {31, 2, 4, 2, 1, 17, 14}, '4': {2, 6, 10, 18, 31, 2, 2}, '5': {31, 16, 30, 1, 1, 17, 14},
	'6': {6, 8, 16, 30, 17, 17, 14}, '7': {31, 1, 2, 4, 8, 8, 8}, '8': {14, 17, 17, 14, 17, 17, 14},
	'9': {14, 17, 17, 15, 1, 2, 12}, '.': {0, 0, 0, 0, 0, 12, 12}, '-': {0, 0, 0, 31, 0, 0, 0},
	'+': {0, 4, 4, 31, 4, 4, 0}, '%': {24, 25, 2, 4, 8, 19, 3}, '(': {2, 4, 8, 8, 8, 4, 2},
	')': {8, 4, 2, 2, 2, 4, 8}, ':': {0, 12, 12, 0, 12, 12, 0}, '/': {0, 1, 2, 4, 8, 16, 0},
	'=': {0, 0, 31, 0, 31, 0, 0}, ',': {0, 0, 0, 0, 12, 4, 8}, '>': {8, 4, 2, 1, 2, 4, 8}, '<': {2, 4, 8, 16, 8, 4, 2},
}

type canvas struct{ *image.RGBA }

func (c canvas) rect(x0, y0, x1, y1 int, col color.Color) {
	for y := y0; y < y1; y++ {
		for x := x0; x < x1; x++ {
			c.Set(x, y, col)
		}
	}
}

func (c canvas) text(x, y int, s string, scale int, col color.Color) {
	for _, ch := range strings.ToUpper(s) {
		g := font[ch]
		for row := 0; row < 7; row++ {
			for bit := 0; bit < 5; bit++ {
				if g[row]&(1<<(4-bit)) != 0 {
					c.rect(x+bit*scale, y+row*scale, x+(bit+1)*scale, y+(row+1)*scale, col)
				}
			}
		}
		x += 6 * scale
	}
}

func textWidth(s string, scale int) int { return len(s) * 6 * scale }

func plot(path string, cells map[key]*cell, oss []float64) error {
	const W, H = 1200, 640
	const left, right, top, bottom = 90, 260, 90, 110
	img := canvas{image.NewRGBA(image.Rect(0, 0, W, H))}
	white, black, grey := color.RGBA{255, 255, 255, 255}, color.RGBA{0, 0, 0, 255}, color.RGBA{200, 200, 200, 255}
	red := color.RGBA{200, 0, 0, 255}
	img.rect(0, 0, W, H, white)
	title := "SIMULATED - PAGES MIGRATED, BEST POLICY / DEFAULT (LRU+TREE)"
	img.text((W-textWidth(title, 3))/2, 20, title, 3, red)
	sub := "GPUSIM TRACE REPLAY IN THE KERNEL LAB, NOT A GPU. LOWER IS BETTER. DASHED: 0.70 (30% FEWER)"
	img.text((W-textWidth(sub, 1))/2, 55, sub, 1, black)

	// y axis: 0 .. ymax
	ymax := 1.2
	for _, c := range cells {
		if v := rel(c.best.migrated(), c.def.migrated()); v > ymax {
			ymax = v
		}
	}
	ph := H - top - bottom
	pw := W - left - right
	y := func(v float64) int { return top + ph - int(v/ymax*float64(ph)) }
	for v := 0.0; v <= ymax+1e-9; v += 0.2 {
		img.rect(left, y(v), left+pw, y(v)+1, grey)
		img.text(left-45, y(v)-3, fmt.Sprintf("%.1f", v), 1, black)
	}
	for x := left; x < left+pw; x += 12 { // target line at 0.7
		img.rect(x, y(0.7), x+6, y(0.7)+2, red)
	}
	img.rect(left, y(1.0), left+pw, y(1.0)+2, black) // default = 1.0
	img.rect(left, top, left+1, top+ph, black)
	img.rect(left, top+ph, left+pw, top+ph+1, black)

	colors := []color.RGBA{{31, 119, 180, 255}, {255, 127, 14, 255}, {44, 160, 44, 255}, {148, 103, 189, 255}, {140, 86, 75, 255}}
	groupW := pw / len(patternOrder)
	barW := (groupW - 30) / max(1, len(oss))
	for gi, p := range patternOrder {
		gx := left + gi*groupW + 15
		for oi, o := range oss {
			c := cells[key{p, o}]
			if c == nil {
				continue
			}
			v := rel(c.best.migrated(), c.def.migrated())
			x0 := gx + oi*barW
			img.rect(x0+2, y(v), x0+barW-2, top+ph, colors[oi%len(colors)])
			img.text(x0+2, y(v)-12, fmt.Sprintf("%.2f", v), 1, black)
			// policy name under the bar, two lines: evict / prefetch
			img.text(x0+2, top+ph+8+0*10, c.best.evict, 1, black)
			pf := map[string]string{"tree-threshold": "tree", "always-max": "amax", "sequential": "seq"}[c.best.prefetch]
			if pf == "" {
				pf = c.best.prefetch
			}
			img.text(x0+2, top+ph+8+1*10, pf, 1, black)
		}
		img.text(gx+(groupW-30-textWidth(p, 2))/2, top+ph+40, p, 2, black)
	}
	img.text(10, top-20, "BEST / DEFAULT PAGES MIGRATED (IN+OUT)", 1, black)
	// legend
	lx, ly := W-right+30, top+10
	img.text(lx, ly, "OVERSUBSCRIPTION", 1, black)
	for oi, o := range oss {
		img.rect(lx, ly+20+oi*22, lx+16, ly+36+oi*22, colors[oi%len(colors)])
		img.text(lx+24, ly+24+oi*22, fmt.Sprintf("%.2fX", o), 2, black)
	}
	img.text(lx, ly+40+len(oss)*22, "LABEL UNDER BAR:", 1, black)
	img.text(lx, ly+52+len(oss)*22, "BEST EVICT/PREFETCH", 1, black)
	img.text(lx, ly+64+len(oss)*22, "(AMAX=ALWAYS-MAX, SEQ=SEQUENTIAL)", 1, black)
	img.text(lx, ly+86+len(oss)*22, "SIMULATED", 3, red)

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func main() {
	in := flag.String("in", "bench/kernel-sim.txt", "benchmark output of test/kernel/lab.sh bench")
	out := flag.String("png", "docs/kernel-sim.png", "PNG plot to write")
	flag.Parse()
	f, err := os.Open(*in)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	runs, err := parse(f)
	f.Close()
	if err != nil || len(runs) == 0 {
		fmt.Fprintf(os.Stderr, "benchplot: %s: %d runs, %v\n", *in, len(runs), err)
		os.Exit(1)
	}
	cells, oss := group(runs)
	table(os.Stdout, cells, oss)
	if err := plot(*out, cells, oss); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "benchplot: %d runs, wrote %s\n", len(runs), *out)
}

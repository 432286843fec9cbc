package maps

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/gpuext/gpuext/devrt/probefiles/launches"
	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/gpubpf/devmap"
	"github.com/gpuext/gpuext/gpubpf/programs"
	"github.com/gpuext/gpuext/lib/tenantfs"
)

// ImageState is what the interposer did with one image (from .status).
type ImageState struct {
	PID    int    `json:"pid"`
	Image  int    `json:"image"`
	State  string `json:"state"` // patched | unpatched
	Reason string `json:"reason"`
	// Fields are the line's other key=value pairs (kernels, jit_ms, api, kind, ...).
	Fields map[string]string `json:"fields,omitempty"`
	// MissedFinal: a context the image ran in ended where the interposer
	// could not see it (the library unloaded with no context left), so that context's last
	// copy of the maps is missing: what ran since the copy before is not
	// counted (status line state=unbound ... final=missed).
	MissedFinal bool `json:"missedFinal,omitempty"`
}

// ParseStatus reads one <pid>.status file (docs/device-probes.md): lines of
// key=value pairs, one per event of an image (image=N
// state=patched|unpatched reason=... ...), image=- state=off for a process
// whose probes did not start, image=- launch_time=off when launch times
// could not be written; image=N [ctx=C] state=bound|unbound when a context
// of the image was bound or ended (final=missed: its last copy could not be
// made, MissedFinal). The last patched/unpatched line of an image wins. It returns the
// images, ordered, and the process-wide events ("REASON", or
// "launch_time=off:REASON").
func ParseStatus(pid int, text string) (images []ImageState, off []string) {
	byIndex := map[int]ImageState{}
	missed := map[int]bool{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 4096), 1<<20)
	for sc.Scan() {
		kv := map[string]string{}
		for _, f := range strings.Fields(sc.Text()) {
			if k, v, ok := strings.Cut(f, "="); ok {
				kv[k] = v
			}
		}
		img, state, reason := kv[abi.StatusKeyImage], kv[abi.StatusKeyState], kv[abi.StatusKeyReason]
		delete(kv, abi.StatusKeyImage)
		delete(kv, abi.StatusKeyState)
		delete(kv, abi.StatusKeyReason)
		if img == abi.StatusImageNone {
			if lt, ok := kv[abi.StatusKeyLaunchTime]; ok && state == "" {
				off = append(off, abi.StatusKeyLaunchTime+"="+lt+":"+reason) // probes on, launch times not written
			} else {
				off = append(off, reason)
			}
			continue
		}
		idx, err := strconv.Atoi(img)
		if err == nil && state == abi.StatusUnbound && kv[abi.StatusKeyFinal] == abi.StatusMissed {
			missed[idx] = true
			continue
		}
		if err != nil || (state != abi.StatusPatched && state != abi.StatusUnpatched) {
			continue // a line this reader does not know, or a context bound
		}
		if len(kv) == 0 {
			kv = nil
		}
		byIndex[idx] = ImageState{PID: pid, Image: idx, State: state, Reason: reason, Fields: kv}
	}
	for _, s := range byIndex {
		s.MissedFinal = missed[s.Image]
		images = append(images, s)
	}
	sort.Slice(images, func(i, j int) bool { return images[i].Image < images[j].Image })
	return images, off
}

// Aggregate is one map summed over a tenant's processes and images.
type Aggregate struct {
	Layout abi.MapLayout `json:"layout"`
	// Counters: arrays and per-warp arrays of u64 values, summed per index.
	Counters []uint64 `json:"counters,omitempty"`
	// Keys: a hash map's live keys, summed over images (one key in two
	// images counts twice).
	Keys int `json:"keys,omitempty"`
	// Records and Dropped: a ringbuf's records and the ones that did not fit.
	Records int    `json:"records,omitempty"`
	Dropped uint64 `json:"dropped,omitempty"`
	// HashEntries: a hash map's live entries, image after image (the
	// views sum one key's values); RecordData: a ringbuf's records in
	// file order, the last MaxKeptRecords of them.
	HashEntries []devmap.Entry `json:"-"`
	RecordData  [][]byte       `json:"-"`
	// Images is how many images' copies were added.
	Images int `json:"images"`
	// Parts: each image's counters, as Counters sums them (a mean over
	// stamps takes only the images with nothing in flight).
	Parts [][]uint64 `json:"-"`
	// Rows: a per-thread map of u64 values, Rows[i][g] = entry i of row g
	// (thread g of a launch) summed over images, for the first
	// programs.MaxPerThreadFields entries; NoRow: accesses by threads past
	// the last row (addRows, summary.go).
	Rows  [][]uint64 `json:"-"`
	NoRow uint64     `json:"noRow,omitempty"`
}

// Tenant is what a tenant's probes counted, across its processes and images.
type Tenant struct {
	Processes int            `json:"processes"`
	Patched   int            `json:"patched"`
	Unpatched int            `json:"unpatched"`
	Reasons   map[string]int `json:"unpatchedReasons,omitempty"` // why images were not patched
	Off       map[string]int `json:"offReasons,omitempty"`       // why processes ran without probes
	// LaunchTimeOff: processes whose probes ran but whose launch times
	// stopped being written, and why (launch-latency has no data from then on).
	LaunchTimeOff map[string]int `json:"launchTimeOffReasons,omitempty"`
	Images        []ImageState   `json:"images"`
	// MissedFinal: images (per process) whose last copy in some context
	// could not be made (ImageState.MissedFinal): the counts are short by
	// what ran there since the copy before.
	MissedFinal int                   `json:"missedFinal,omitempty"`
	Maps        map[string]*Aggregate `json:"maps"`
	// Launches is what the interposer saw of every launch, patched image
	// or not (the <pid>.launches files): coverage and the kernel table;
	// nil when no process wrote one.
	Launches *launches.Table `json:"launches,omitempty"`
	// Skipped names the .maps files (or maps in them) that were not added, and why.
	Skipped []string `json:"skipped,omitempty"`
	// Read is how many bytes of the tenant's files were read, and
	// OverTotal whether some were left unread for Limits.Total.
	Read      int64 `json:"-"`
	OverTotal bool  `json:"-"`
}

// launchTimeOffPrefix starts what ParseStatus returns for a process whose
// launch times stopped being written (image=- launch_time=off reason=R).
const launchTimeOffPrefix = abi.StatusKeyLaunchTime + "=" + abi.StatusOff + ":"

// MaxKeptRecords is how many of a ringbuf's last records an Aggregate
// keeps for the views (programs.MaxViewEntries: the most a view shows).
const MaxKeptRecords = programs.MaxViewEntries

// MaxStatusSize is the largest <pid>.status file ReadTenant reads.
const MaxStatusSize = 16 << 20

// MaxEntries is the most entries ReadTenant lists in a probes directory.
const MaxEntries = 1 << 16

// ReadTenant reads a tenant's probes accounting directory
// ($GPUEXT_TENANT_ACCT/probes on the host: <stateDir>/acct/<id>/probes).
// manifest is the tenant's current module (probes/manifest.json of its
// tenant dir); maps of a file whose layout differs from it (a process that
// ran an older probe set) are skipped and named in Skipped. A nil manifest
// takes every map, the first layout of a name winning. A missing directory
// is an empty tenant.
//
// The directory and its files are the tenant's: dir's last component and
// every file are opened through lib/tenantfs (no links, regular files
// only, bounded: MaxStatusSize, MaxFileSize, MaxEntries). What it refuses is
// named in Skipped, never read: a link to a host file shows nothing of it.
func ReadTenant(dir string, manifest *abi.Manifest) (*Tenant, error) {
	return ReadTenantWithin(dir, manifest, Limits{})
}

// Limits bound what ReadTenantWithin reads; a zero field is the package's
// bound (MaxEntries, MaxStatusSize, MaxFileSize; no total).
type Limits struct {
	Entries int   // entries listed in the directory
	Status  int64 // bytes of one .status file
	Maps    int64 // bytes of one .maps file (MaxFileSizeFor gives a module's)
	// Total: bytes of all the files read; the files past it are named in
	// Skipped, not read.
	Total int64
}

// MaxFileSizeFor is the largest .maps file the module of manifest makes:
// the header, one entry per map and each map's symbol (descriptor and
// data, padded to 8). A bigger file is not one of its processes' copies.
func MaxFileSizeFor(manifest *abi.Manifest) int64 {
	n := int64(HeaderSize)
	for _, m := range manifest.Maps {
		sym := int64(abi.MapHdrSize) + int64(min(m.Layout.DataSize, abi.MaxMapData))
		n += entrySize + (sym+7)/8*8
	}
	return min(n, MaxFileSize)
}

// ReadTenantWithin is ReadTenant reading at most what lim allows: for a
// reader that runs often (the agent's metrics at every scrape), where
// ReadTenant's bounds (a GiB per file) would let a tenant make each read
// cost that much.
func ReadTenantWithin(dir string, manifest *abi.Manifest, lim Limits) (*Tenant, error) {
	lim.Entries = boundInt(lim.Entries, MaxEntries)
	lim.Status = boundInt(lim.Status, MaxStatusSize)
	lim.Maps = boundInt(lim.Maps, MaxFileSize)
	t := &Tenant{Maps: map[string]*Aggregate{}, Images: []ImageState{}}
	want := map[string]abi.MapLayout{}
	if manifest != nil {
		for _, m := range manifest.Maps {
			want[m.Name] = m.Layout
			t.Maps[m.Name] = &Aggregate{Layout: m.Layout}
		}
	}
	d, err := tenantfs.OpenDir(filepath.Dir(dir), filepath.Base(dir))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return t, nil
	case errors.Is(err, tenantfs.ErrRefused):
		t.Skipped = append(t.Skipped, fmt.Sprintf("%s: %v", filepath.Base(dir), refusal(err)))
		return t, nil
	case err != nil:
		return nil, fmt.Errorf("read probes dir: %w", err)
	}
	defer d.Close()
	names, err := d.Names(lim.Entries)
	if errors.Is(err, tenantfs.ErrRefused) {
		t.Skipped = append(t.Skipped, fmt.Sprintf("%s: more than %d entries: not read", filepath.Base(dir), lim.Entries))
		return t, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read probes dir: %w", err)
	}
	sort.Strings(names)
	// read is one file of the tenant: nil, nil when it was refused (named in Skipped).
	var total int64
	read := func(name string, limit int64) ([]byte, error) {
		capped := false
		if lim.Total > 0 {
			if total >= lim.Total {
				t.OverTotal = true
				t.Skipped = append(t.Skipped, fmt.Sprintf("%s: not read: the files before it took the %d bytes this read may take", name, lim.Total))
				return nil, nil
			}
			capped = lim.Total-total < limit
			limit = min(limit, lim.Total-total)
		}
		b, err := d.ReadFile(name, limit)
		if capped && errors.Is(err, tenantfs.ErrTooBig) {
			t.OverTotal = true
			t.Skipped = append(t.Skipped, fmt.Sprintf("%s: not read: more than the %d bytes this read may still take", name, limit))
			total = lim.Total
			return nil, nil
		}
		total += int64(len(b))
		t.Read = total
		switch {
		case errors.Is(err, tenantfs.ErrRefused):
			t.Skipped = append(t.Skipped, fmt.Sprintf("%s: %v", name, refusal(err)))
			return nil, nil
		case errors.Is(err, fs.ErrNotExist):
			return nil, nil // gone since the listing
		case err != nil:
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		return b, nil
	}
	pids := map[int]bool{}
	for _, name := range names {
		if strings.HasPrefix(name, ".") {
			continue
		}
		switch {
		case strings.HasSuffix(name, abi.StatusSuffix):
			pid, err := strconv.Atoi(strings.TrimSuffix(name, abi.StatusSuffix))
			if err != nil {
				continue
			}
			b, err := read(name, lim.Status)
			if err != nil {
				return nil, err
			}
			if b == nil {
				continue
			}
			pids[pid] = true
			imgs, off := ParseStatus(pid, string(b))
			for _, s := range imgs {
				t.Images = append(t.Images, s)
				if s.MissedFinal {
					t.MissedFinal++
				}
				if s.State == abi.StatusPatched {
					t.Patched++
				} else {
					t.Unpatched++
					if t.Reasons == nil {
						t.Reasons = map[string]int{}
					}
					t.Reasons[s.Reason]++
				}
			}
			for _, r := range off {
				m := &t.Off
				if lt, ok := strings.CutPrefix(r, launchTimeOffPrefix); ok {
					m, r = &t.LaunchTimeOff, lt
				}
				if *m == nil {
					*m = map[string]int{}
				}
				(*m)[r]++
			}
		case strings.HasSuffix(name, abi.LaunchesSuffix):
			b, err := read(name, launches.MaxFileSize)
			if err != nil {
				return nil, err
			}
			if b == nil {
				continue
			}
			f, err := launches.Decode(b)
			if err != nil {
				t.Skipped = append(t.Skipped, fmt.Sprintf("%s: %v", name, err))
				continue
			}
			pids[int(f.PID)] = true
			if t.Launches == nil {
				t.Launches = launches.NewTable()
			}
			t.Launches.Add(f)
		case strings.HasSuffix(name, abi.MapsSuffix):
			b, err := read(name, lim.Maps)
			if err != nil {
				return nil, err
			}
			if b == nil {
				continue
			}
			f, err := Decode(b)
			if err != nil {
				t.Skipped = append(t.Skipped, fmt.Sprintf("%s: %v", name, err))
				continue
			}
			pids[int(f.PID)] = true
			t.add(name, f, want, manifest != nil)
		}
	}
	t.Processes = len(pids)
	if t.Launches != nil {
		t.Launches.Sort()
	}
	sort.Slice(t.Images, func(i, j int) bool {
		a, b := t.Images[i], t.Images[j]
		return a.PID < b.PID || (a.PID == b.PID && a.Image < b.Image)
	})
	return t, nil
}

// boundInt is v when it is set and within limit, else limit.
func boundInt[T int | int64](v, limit T) T {
	if v <= 0 || v > limit {
		return limit
	}
	return v
}

// refusal is what tenantfs refused, without the path (the name is given).
func refusal(err error) error {
	for _, r := range []error{tenantfs.ErrSymlink, tenantfs.ErrNotRegular, tenantfs.ErrTooBig} {
		if errors.Is(err, r) {
			return r
		}
	}
	return tenantfs.ErrRefused
}

func (t *Tenant) add(file string, f *File, want map[string]abi.MapLayout, strict bool) {
	for _, m := range f.Maps {
		if !m.Present {
			continue
		}
		agg, ok := t.Maps[m.Name]
		if !ok {
			if strict {
				t.Skipped = append(t.Skipped, fmt.Sprintf("%s: map %q is not in the tenant's module", file, m.Name))
				continue
			}
			agg = &Aggregate{Layout: m.Layout}
			t.Maps[m.Name] = agg
		}
		if agg.Layout != m.Layout {
			t.Skipped = append(t.Skipped, fmt.Sprintf("%s: map %q has another layout than the tenant's module (an older probe set)", file, m.Name))
			continue
		}
		if err := agg.add(m); err != nil {
			t.Skipped = append(t.Skipped, fmt.Sprintf("%s: %v", file, err))
		}
	}
}

func (a *Aggregate) add(m Map) error {
	switch {
	case m.Layout.Type == abi.MapRingbuf:
		recs, dropped, err := m.Ringbuf()
		if err != nil {
			return err
		}
		a.Records += len(recs)
		a.Dropped += dropped
		a.RecordData = append(a.RecordData, recs...)
		if n := len(a.RecordData); n > MaxKeptRecords {
			a.RecordData = slices.Clone(a.RecordData[n-MaxKeptRecords:])
		}
	case m.Layout.Type == abi.MapHash:
		ents, err := m.Entries()
		if err != nil {
			return fmt.Errorf("map %q: %w", m.Name, err)
		}
		a.Keys += len(ents)
		a.HashEntries = append(a.HashEntries, ents...)
	case m.Layout.ValueSize == 8:
		c, err := m.Counters()
		if err != nil {
			return err
		}
		if a.Counters == nil {
			a.Counters = make([]uint64, len(c))
		}
		for i, v := range c {
			a.Counters[i] += v
		}
		a.Parts = append(a.Parts, c)
		if m.Layout.Type == abi.MapPerThread {
			a.addRows(m)
		}
	}
	a.Images++
	return nil
}

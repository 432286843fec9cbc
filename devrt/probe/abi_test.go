package probe

import (
	"os"
	"regexp"
	"strconv"
	"testing"
)

// The Go mirror of the DEVICE PROBES section of gpuext_abi.h: every number
// the translator, the helper library and the interposer share must be the
// header's.
func TestABIHeaderMatches(t *testing.T) {
	src, err := os.ReadFile("../../kmod/include/gpuext_abi.h")
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]int64{}
	for _, m := range regexp.MustCompile(`(?m)^#define (GPUEXT_(?:PH|DMAP|PROBE)_[A-Z0-9_]+) (\d+)`).FindAllSubmatch(src, -1) {
		v, _ := strconv.ParseInt(string(m[2]), 10, 64)
		values[string(m[1])] = v
	}
	for _, m := range regexp.MustCompile(`(?m)^\s+(GPUEXT_(?:DMAP|PROBE)_[A-Z_]+) = (\d+),`).FindAllSubmatch(src, -1) {
		v, _ := strconv.ParseInt(string(m[2]), 10, 64)
		values[string(m[1])] = v
	}
	want := map[string]int64{
		"GPUEXT_PH_MAP_LOOKUP_ELEM": HelperMapLookupElem, "GPUEXT_PH_MAP_UPDATE_ELEM": HelperMapUpdateElem,
		"GPUEXT_PH_MAP_DELETE_ELEM": HelperMapDeleteElem, "GPUEXT_PH_KTIME_GET_NS": HelperKtimeGetNs,
		"GPUEXT_PH_SMP_PROCESSOR_ID": HelperSmpProcessorID, "GPUEXT_PH_RINGBUF_OUTPUT": HelperRingbufOutput,
		"GPUEXT_PH_BASE": HelperBase, "GPUEXT_PH_THREAD_IDX": HelperThreadIdx, "GPUEXT_PH_BLOCK_IDX": HelperBlockIdx,
		"GPUEXT_PH_BLOCK_DIM": HelperBlockDim, "GPUEXT_PH_GRID_DIM": HelperGridDim, "GPUEXT_PH_WARP_ID": HelperWarpID,
		"GPUEXT_PH_LANE_ID": HelperLaneID, "GPUEXT_PH_SM_ID": HelperSmID, "GPUEXT_PH_GLOBALTIMER": HelperGlobaltimer,
		"GPUEXT_PH_BLOCK_LINEAR_ID": HelperBlockLinearID, "GPUEXT_PH_THREAD_LINEAR_ID": HelperThreadLinearID,
		"GPUEXT_DMAP_HDR_SIZE": MapHdrSize, "GPUEXT_DMAP_WARP_SLOTS": MapWarpSlots,
		"GPUEXT_DMAP_ARRAY": int64(MapArray), "GPUEXT_DMAP_HASH": int64(MapHash),
		"GPUEXT_DMAP_PER_WARP": int64(MapPerWarp), "GPUEXT_DMAP_RINGBUF": int64(MapRingbuf),
		"GPUEXT_PROBE_KERNEL_ENTRY": int64(KernelEntry), "GPUEXT_PROBE_KERNEL_EXIT": int64(KernelExit),
	}
	for name, w := range want {
		got, ok := values[name]
		if !ok {
			t.Errorf("%s: not in gpuext_abi.h", name)
		} else if got != w {
			t.Errorf("%s = %d in gpuext_abi.h, %d in Go", name, got, w)
		}
	}
	for _, sec := range []struct{ macro, value string }{{"GPUEXT_PROBE_SEC_ENTRY", SecKernelEntry}, {"GPUEXT_PROBE_SEC_EXIT", SecKernelExit}} {
		if !regexp.MustCompile(`#define ` + sec.macro + ` "` + regexp.QuoteMeta(sec.value) + `"`).Match(src) {
			t.Errorf("%s is not %q in gpuext_abi.h", sec.macro, sec.value)
		}
	}
	if len(HelperNames) != 16 {
		t.Errorf("HelperNames has %d helpers, the header 16", len(HelperNames))
	}
}

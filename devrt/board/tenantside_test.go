package board

import (
	"math"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestTenantAttacks: the tenant side run for real. A hostile tenant's
// processes run the interposer (over the fake libcuda), then the tenant
// does to its acct dir what a process in its container can; the publisher
// runs (Run, as in the agent) the whole time. Asserted: the publisher is up
// (Run returns when asked), the board is unchanged (no latency-critical
// work shown), and another best-effort tenant's launches are not delayed.
func TestTenantAttacks(t *testing.T) {
	build := buildDevrt(t)
	cases := []struct {
		name   string
		class  string // the attacker's class in the host's state
		attack func(t *testing.T, acct string, stop <-chan struct{})
	}{
		{"forge", "best-effort", func(t *testing.T, acct string, _ <-chan struct{}) {
			// latency-critical and a deadline of 2^64-1, written in place
			f, err := os.OpenFile(filepath.Join(acct, usageFile), os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			b := usageBytes(classLatencyCritical, math.MaxUint64)
			f.WriteAt(b[usageOffLCActiveUntil:usageOffLCActiveUntil+8], usageOffLCActiveUntil)
			f.WriteAt(b[usageOffClass:usageOffClass+4], usageOffClass)
		}},
		{"truncate", "latency-critical", func(t *testing.T, acct string, stop <-chan struct{}) {
			path := filepath.Join(acct, usageFile)
			go func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					os.Truncate(path, int64(i%2)*usageSize/2)
				}
			}()
		}},
		{"symlink", "latency-critical", func(t *testing.T, acct string, _ <-chan struct{}) {
			path := filepath.Join(acct, usageFile)
			os.Remove(path)
			if err := os.Symlink(secretUsage(t), path); err != nil {
				t.Fatal(err)
			}
		}},
		{"fifo", "latency-critical", func(t *testing.T, acct string, _ <-chan struct{}) {
			path := filepath.Join(acct, usageFile)
			os.Remove(path)
			if err := syscall.Mkfifo(path, 0o666); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			state := t.TempDir()
			evil := newTenant(t, state, 1, c.class, 30000)
			victim := newTenant(t, state, 2, "best-effort", 0)
			boardPath := filepath.Join(state, "board", FileName)
			pub := openPublisher(t, state)
			runPublisher(t, pub)
			// The attacker's own process: its usage file, nothing pending.
			hold(t, build, evil, "hold", "app_procaddr", "alloc", "1MiB", "hold")
			launch(t, build, victim, boardPath)
			_, seq0 := pub.Board()

			stop := make(chan struct{})
			var once sync.Once
			defer once.Do(func() { close(stop) })
			c.attack(t, evil.acct, stop)
			time.Sleep(RescanInterval + 200*time.Millisecond) // the publisher rescans: it sees what the tenant did
			for i := 0; i < 3; i++ {
				if us := launch(t, build, victim, boardPath); us > 20000 {
					t.Errorf("victim's launch %d took %dus: held back by the attacker", i, us)
				}
			}
			once.Do(func() { close(stop) })
			if until, seq := pub.Board(); until != 0 || seq != seq0 {
				t.Errorf("board until=%d seq=%d, was 0 and seq %d", until, seq, seq0)
			}
			u, err := ReadUsage(victim.acct)
			if err != nil {
				t.Fatal(err)
			}
			if u.DelayedLaunches != 0 || u.Launches != 4 {
				t.Errorf("victim: %d of %d launches delayed, want 0 of 4", u.DelayedLaunches, u.Launches)
			}
		})
	}
}

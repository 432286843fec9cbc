package admission_test

import "runtime"

// The main goroutine keeps the process's main thread for itself, so no
// test's goroutine runs there: TestAcctDirWhereMountsDoNotReachTheNode
// unshares its goroutine's thread into a mount namespace of its own and
// reads the host's mounts through /proc/<pid>, which is the main
// thread's view. When that goroutine ran on the main thread, the main
// thread left the host's mounts: the test failed, and the tests after it
// met a mount left in their temp dirs.
func init() { runtime.LockOSThread() }

// Command nriprobe is the lab's smallest external NRI plugin. It connects to
// a runtime's NRI socket, records every pod and container event it sees as
// one JSON line in a file, and can add one environment variable to each
// container it is asked to create. test/lab/containerd.sh uses it to prove
// that external plugins reach the lab containerd; tests may use it to see
// exactly what NRI delivers (labels, annotations, cgroups path, pid).
package main

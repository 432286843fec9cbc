// Command gpuext-kube is the k8s lab's Kubernetes in one binary: etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kubectl,
// each the upstream command of k8s.io/kubernetes v1.37.2 (etcd v3.7), picked by
// the name it is called by (test/k8s/install.sh makes one symlink per
// component) or by its first argument:
//
//	kube-apiserver --etcd-servers=...
//	gpuext-kube kubelet --config=...
//
// One binary links once instead of six times, which is most of the build time
// on a 2-core CI machine. It is a test tool: nothing of it is part of gpuext.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	_ "time/tzdata" // kube-apiserver and kube-controller-manager: CronJob time zones

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"          // --logging-format=json
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // the version metric
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

// self is the name of the binary itself; any other name is a component.
const self = "gpuext-kube"

// components run one upstream main each, with os.Args as that main sees them.
var components = map[string]func() int{
	"etcd": func() int {
		etcdmain.Main(os.Args)
		return 0
	},
	"kube-apiserver": func() int { return cli.Run(apiserver.NewAPIServerCommand()) },
	"kube-controller-manager": func() int {
		return cli.Run(controllermanager.NewControllerManagerCommand())
	},
	"kube-scheduler": func() int { return cli.Run(scheduler.NewSchedulerCommand()) },
	"kubelet":        func() int { return cli.Run(kubelet.NewKubeletCommand(context.Background())) },
	"kubectl":        kubectl,
}

func kubectl() int {
	logs.GlogSetter(kubectlcmd.GetLogVerbosity(os.Args)) //nolint:errcheck // as upstream kubectl
	command := kubectlcmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		kubectlutil.CheckErr(err)
	}
	return 0
}

func names() []string {
	var n []string
	for k := range components {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

func usage() *cobra.Command {
	return &cobra.Command{
		Use:   self + " COMPONENT [ARGS...]",
		Short: "etcd and the Kubernetes components of the gpuext k8s lab in one binary",
		Long: "Runs one of " + fmt.Sprint(names()) + " with ARGS, as that component's own binary would.\n" +
			"A symlink named after a component runs it directly (test/k8s/install.sh makes them).",
	}
}

func main() {
	name := filepath.Base(os.Args[0])
	if _, ok := components[name]; !ok {
		if len(os.Args) < 2 || components[os.Args[1]] == nil {
			u := usage()
			if len(os.Args) >= 2 && os.Args[1] != "-h" && os.Args[1] != "--help" && os.Args[1] != "help" {
				fmt.Fprintf(os.Stderr, "%s: unknown component %q (want one of %v)\n", self, os.Args[1], names())
				os.Exit(2)
			}
			_ = u.Help()
			os.Exit(0)
		}
		name = os.Args[1]
		os.Args = append([]string{name}, os.Args[2:]...)
	}
	os.Exit(components[name]())
}

// Command gen-overlay plans and writes the go build -overlay file that puts
// the patches declared in pkg/patched into a copy of the upstream Kubernetes
// module, with the files it generates (hooked copies of upstream files and
// each patch's registration).
//
//	go run ./hack/gen-overlay -upstream _output/upstream/kubernetes@v1.37.2 -repo . -gen _output/build/overlay -o _output/build/overlay.json
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/critlet/critlet/internal/overlay"
	"github.com/critlet/critlet/pkg/patched"
)

func main() {
	upstream := flag.String("upstream", "", "directory of the upstream k8s.io/kubernetes copy the build uses")
	repo := flag.String("repo", ".", "root of this repository")
	gen := flag.String("gen", "", "directory for the generated files (the build owns it: other files in it are removed)")
	out := flag.String("o", "", "overlay file to write")
	flag.Parse()
	if *upstream == "" || *out == "" || *gen == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: gen-overlay -upstream DIR [-repo DIR] -gen DIR -o FILE")
		os.Exit(2)
	}
	plan, err := overlay.Build(*upstream, filepath.Join(*repo, overlay.SourceRoot), *gen, patched.Patches)
	if err == nil {
		err = plan.Apply(*gen, *out)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "gen-overlay: %v\n", err)
		os.Exit(1)
	}
}

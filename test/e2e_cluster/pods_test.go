//go:build e2ecluster

package e2ecluster

import (
	"fmt"
	"strings"
	"testing"

	"github.com/critlet/critlet/internal/cluster"
)

// pod is a pod of the workload image, as the suite writes it.
type pod struct {
	name, namespace string
	node            string // bound by nodeName; "" for a static pod
	class           string // priorityClassName
	grace           int    // terminationGracePeriodSeconds
	shell           string // the container's command, for sh -c; "" for the image's
	resources       string // YAML flow mapping; "" for none
}

// manifest is p's YAML document.
func (p pod) manifest() string {
	var b strings.Builder
	ns := p.namespace
	if ns == "" {
		ns = "default"
	}
	fmt.Fprintf(&b, "---\napiVersion: v1\nkind: Pod\nmetadata: {name: %s, namespace: %s}\nspec:\n", p.name, ns)
	if p.node != "" {
		fmt.Fprintf(&b, "  nodeName: %s\n", p.node)
	}
	if p.class != "" {
		fmt.Fprintf(&b, "  priorityClassName: %s\n", p.class)
	}
	grace := p.grace
	if grace == 0 {
		grace = 5
	}
	fmt.Fprintf(&b, "  terminationGracePeriodSeconds: %d\n  containers:\n  - name: c\n    image: %s\n    imagePullPolicy: Never\n", grace, cluster.WorkloadImage)
	if p.shell != "" {
		fmt.Fprintf(&b, "    command: [\"/bin/sh\", \"-c\", %q]\n", p.shell)
	}
	resources := p.resources
	if resources == "" {
		resources = "{}"
	}
	fmt.Fprintf(&b, "    resources: %s\n", resources)
	return b.String()
}

// cpuRequest is a resources mapping requesting milli millicores.
func cpuRequest(milli int64) string { return fmt.Sprintf("{requests: {cpu: %dm}}", milli) }

// apply creates the pods with kubectl apply.
func (e *env) apply(t *testing.T, pods ...pod) {
	t.Helper()
	var b strings.Builder
	for _, p := range pods {
		b.WriteString(p.manifest())
	}
	if out, err := e.c.KubectlInput(e.ctx, "n1", []byte(b.String()), "apply", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

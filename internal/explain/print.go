package explain

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

// Formats Print knows.
var Formats = []string{"text", "json", "yaml"}

// Print writes ex in format: text for people, json or yaml (the schema of
// types.go) for scripts.
func Print(w io.Writer, ex *Explanation, format string) error {
	switch format {
	case "text", "":
		return printText(w, ex)
	case "json":
		b, err := json.MarshalIndent(ex, "", "  ")
		if err != nil {
			return fmt.Errorf("rendering json: %w", err)
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	case "yaml":
		b, err := yaml.Marshal(ex)
		if err != nil {
			return fmt.Errorf("rendering yaml: %w", err)
		}
		_, err = w.Write(b)
		return err
	}
	return inputErrorf("unknown output format %q: want one of %s", format, strings.Join(Formats, ", "))
}

func printText(w io.Writer, ex *Explanation) error {
	var b strings.Builder
	class := ""
	if ex.Pod.PriorityClassName != "" {
		class = " (" + ex.Pod.PriorityClassName + ")"
	}
	static := ""
	if ex.Pod.Static {
		static = ", static"
	}
	fmt.Fprintf(&b, "Pod %s/%s, priority %d%s%s, on node %s beside %d active pods.\n", ex.Pod.Namespace, ex.Pod.Name, ex.Pod.Priority, class, static, ex.Node, ex.ActivePods)
	switch ex.Verdict {
	case Fits:
		b.WriteString("Verdict: fits; nothing is preempted.\n")
	case AdmittedAfterPreemption:
		fmt.Fprintf(&b, "Verdict: admitted after preemption (%s).\n", ex.Message)
	default:
		fmt.Fprintf(&b, "Verdict: rejected, %s: %s\n", ex.Reason, ex.Message)
	}
	if len(ex.Shortfall) > 0 {
		b.WriteString("\n")
		t := table(&b)
		fmt.Fprintln(t, "SHORTFALL\tMISSING\tREQUESTED\tUSED\tCAPACITY")
		for _, s := range ex.Shortfall {
			f := func(v int64) string { return quantity(s.Resource, v) }
			fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\n", s.Resource, f(s.Missing), f(s.Requested), f(s.Used), f(s.Capacity))
		}
		t.Flush()
	}
	for _, p := range ex.Policies {
		b.WriteString("\n")
		if p.Verdict == Rejected {
			fmt.Fprintf(&b, "Policy %s: nothing can be preempted: %s\n", p.Policy, p.Error)
			continue
		}
		var freed []string
		for _, s := range ex.Shortfall {
			freed = append(freed, s.Resource+" "+quantity(s.Resource, p.Freed[s.Resource]))
		}
		fmt.Fprintf(&b, "Policy %s: %d victim(s), in the order they are terminated; they free %s.\n", p.Policy, len(p.Victims), strings.Join(freed, ", "))
		t := table(&b)
		fmt.Fprintln(t, "VICTIM\tNAMESPACE\tQOS\tPRIORITY\tCPU\tMEMORY")
		for _, v := range p.Victims {
			fmt.Fprintf(t, "%s\t%s\t%s\t%d\t%s\t%s\n", v.Name, v.Namespace, v.QOS, v.Priority,
				quantity(string(v1.ResourceCPU), v.CPU), quantity(string(v1.ResourceMemory), v.Memory))
		}
		t.Flush()
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// table is a tab writer with kubectl's spacing.
func table(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 6, 4, 3, ' ', 0)
}

// quantity renders a base-unit amount of resource as a Kubernetes quantity.
func quantity(res string, v int64) string {
	switch v1.ResourceName(res) {
	case v1.ResourceCPU:
		return resource.NewMilliQuantity(v, resource.DecimalSI).String()
	case v1.ResourceMemory, v1.ResourceEphemeralStorage:
		return resource.NewQuantity(v, resource.BinarySI).String()
	}
	return resource.NewQuantity(v, resource.DecimalSI).String()
}

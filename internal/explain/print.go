package explain

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
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
		if len(ex.Policies) == 0 && deviceShort(ex) {
			b.WriteString("The container manager refuses it before preemption: only a kubelet run with --critical-preemption-devices preempts device holders (explain with that flag to see whom).\n")
		}
	}
	if len(ex.Shortfall) > 0 {
		b.WriteString("\n")
		t := table(&b)
		fmt.Fprintln(t, "SHORTFALL\tMISSING\tREQUESTED\tUSED\tCAPACITY")
		for _, s := range ex.Shortfall {
			f := func(v int64) string { return quantity(s.Resource, v) }
			name := s.Resource
			if s.Device {
				name += " (devices)"
			}
			fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\n", name, f(s.Missing), f(s.Requested), f(s.Used), f(s.Capacity))
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
		devices := deviceColumn(p.Victims)
		fmt.Fprint(t, "VICTIM\tNAMESPACE\tQOS\tPRIORITY\tCPU\tMEMORY")
		if devices {
			fmt.Fprint(t, "\tDEVICES")
		}
		fmt.Fprintln(t)
		for _, v := range p.Victims {
			fmt.Fprintf(t, "%s\t%s\t%s\t%d\t%s\t%s", v.Name, v.Namespace, v.QOS, v.Priority,
				quantity(string(v1.ResourceCPU), v.CPU), quantity(string(v1.ResourceMemory), v.Memory))
			if devices {
				fmt.Fprintf(t, "\t%s", deviceList(v.Devices))
			}
			fmt.Fprintln(t)
		}
		t.Flush()
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// deviceShort says whether ex's shortfall has devices in it.
func deviceShort(ex *Explanation) bool {
	for _, s := range ex.Shortfall {
		if s.Device {
			return true
		}
	}
	return false
}

// deviceColumn says whether any victim holds devices: the column is shown
// only then, so tables without devices read as before.
func deviceColumn(vs []Victim) bool {
	for _, v := range vs {
		if len(v.Devices) > 0 {
			return true
		}
	}
	return false
}

// deviceList renders devices as "name=count" pairs in name order, "-"
// for none.
func deviceList(devices map[string]int64) string {
	if len(devices) == 0 {
		return "-"
	}
	var out []string
	for _, r := range slices.Sorted(maps.Keys(devices)) {
		out = append(out, fmt.Sprintf("%s=%d", r, devices[r]))
	}
	return strings.Join(out, ",")
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

package checkpoint

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// BenchmarkRoundStart records a round of victims whose kills start
// together: in one write, as the admission handler writes a wave, or in
// one write per victim, each synced to disk as on a node.
func BenchmarkRoundStart(b *testing.B) {
	for _, n := range []int{10, 100} {
		round := Preemption{PodUID: "crit", Namespace: "kube-system", Name: "critical", Started: t0}
		for i := range n {
			uid := types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", i))
			round.Victims = append(round.Victims, Victim{UID: uid, Namespace: "default", Name: fmt.Sprint("victim-", i), GracePeriodSeconds: 30})
		}
		at := t0.Add(time.Second)
		started := func(k int) Preemption {
			p := round
			p.Victims = append([]Victim(nil), round.Victims...)
			for i := range k {
				p.Victims[i].KillStarted = at
			}
			return p
		}
		for _, way := range []struct {
			name  string
			start func(*Store) error
		}{
			{"one-write", func(s *Store) error { return s.Record(started(n)) }},
			{"write-per-victim", func(s *Store) error {
				for k := 1; k <= n; k++ {
					if err := s.Record(started(k)); err != nil {
						return err
					}
				}
				return nil
			}},
		} {
			b.Run(fmt.Sprintf("victims=%d/%s", n, way.name), func(b *testing.B) {
				s, err := Open(klog.Background(), b.TempDir(), func() time.Time { return at })
				if err != nil {
					b.Fatal(err)
				}
				for b.Loop() {
					if err := way.start(s); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

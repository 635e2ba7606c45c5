package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
)

// maxInput bounds each input read: a file, standard input, an API
// response. 256 MiB is 30 times the 8.6 MB JSON of 5,000 pods
// (BenchmarkOffline5000's): a cluster-wide dump of some 150,000 pods
// (Kubernetes' largest supported cluster) fits. Larger is rather a wrong
// file or a device than a dump; for a larger cluster, the node's pods are
// selected first (kubectl get pods -A --field-selector
// spec.nodeName=NODE). Decoding JSON holds some 5 times the input at its
// peak; YAML, which holds 25 times, is decoded from at most 64 MiB, its
// aliases expanded (internal/explain's maxYAML). A variable for the tests.
var maxInput int64 = 256 << 20

// readInput reads the file path names for flag, or stdin for "-" where
// stdin is offered.
func readInput(flag, path string, stdin io.Reader) ([]byte, error) {
	if path == "-" {
		if stdin == nil {
			return nil, errors.New("only --pod can be read from standard input")
		}
		b, err := readAtMost(stdin, maxInput)
		if err != nil {
			return nil, fmt.Errorf("%s: reading standard input: %w", flag, err)
		}
		return b, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	defer f.Close()
	b, err := readAtMost(f, maxInput)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", flag, path, err)
	}
	return b, nil
}

// readAtMost reads r to its end, failing once it passes limit bytes.
func readAtMost(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, tooLarge(limit)
	}
	return b, nil
}

func tooLarge(limit int64) error {
	size := fmt.Sprintf("%d bytes", limit)
	if limit%(1<<20) == 0 {
		size = fmt.Sprintf("%d MiB", limit>>20)
	}
	return fmt.Errorf("larger than the input limit of %s", size)
}

// limitResponses bounds each API response's body to maxInput, as client-go
// reads a body whole.
func limitResponses(rt http.RoundTripper) http.RoundTripper {
	return limitedTransport{rt, maxInput}
}

type limitedTransport struct {
	next  http.RoundTripper
	limit int64
}

func (t limitedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	resp.Body = &limitedBody{ReadCloser: resp.Body, left: t.limit, limit: t.limit}
	return resp, nil
}

// limitedBody fails a read past limit bytes.
type limitedBody struct {
	io.ReadCloser
	left, limit int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	// One byte more than is left tells a body of exactly limit bytes
	// from a larger one.
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.ReadCloser.Read(p)
	if b.left -= int64(n); b.left < 0 {
		return 0, fmt.Errorf("the API server's response is %w", tooLarge(b.limit))
	}
	return n, err
}

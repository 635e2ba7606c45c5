package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"strings"
)

// Version is the format this package writes. A reader accepts its own
// version and ignores fields it does not know, so a kubelet may read what
// an older or newer one of the same version wrote; a file of another
// version is not trusted.
const Version = 1

// file is the checkpoint on disk: the state as JSON, and its CRC-32C, so
// that integrity is checked over the bytes written whatever fields a reader
// knows.
type file struct {
	Kind     string          `json:"kind"`
	Version  int             `json:"version"`
	State    json.RawMessage `json:"state"`
	Checksum uint32          `json:"checksum"`
}

// kind tells critlet's checkpoint from any other file of the same name.
const kind = "critlet-preemptions"

var crc = crc32.MakeTable(crc32.Castagnoli)

// ErrForeign is a checkpoint that is not one this package can trust: of
// another kind or version, failing its checksum, or larger than any
// kubelet writes.
var ErrForeign = errors.New("not a checkpoint this kubelet can trust")

// Bounds on what a kubelet writes and reads. A node runs at most a few
// hundred pods (the kubelet's --max-pods defaults to 110; the largest
// nodes in use run 250 to 500), every victim is a pod on the node, and a
// preemption is recorded per critical pod, admitted one at a time, so a
// real file holds a handful of records and at most a few hundred victims.
// The bounds allow several times that; past them a file is damaged or
// forged, and is not read (nor written: a kubelet writes only what it
// would read back). maxFileBytes holds maxPreemptions records and
// maxVictims victims with every name at the API's longest (about 0.5 kB
// each, 2.4 MB in all: TestBoundsHoldTheLargestRealFile), with room for
// fields a later writer adds, and bounds the memory spent reading it.
const (
	maxPreemptions = 1024
	maxVictims     = 4096 // in all the file's records together
	maxFileBytes   = 4 << 20
)

// encode returns the file for s, or an error if s is beyond the bounds.
func encode(s State) ([]byte, error) {
	var victims int
	for _, p := range s {
		victims += len(p.Victims)
	}
	if err := within(len(s), victims); err != nil {
		return nil, err
	}
	state, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("encoding preemptions: %w", err)
	}
	blob, err := json.Marshal(file{Kind: kind, Version: Version, State: state, Checksum: crc32Of(state)})
	if err != nil {
		return nil, fmt.Errorf("encoding the checkpoint: %w", err)
	}
	if len(blob) > maxFileBytes {
		return nil, fmt.Errorf("the checkpoint would be %d bytes, more than the %d a kubelet reads", len(blob), maxFileBytes)
	}
	return blob, nil
}

// decode returns the state in blob, once it is known to be whole, of this
// kind and version, and within the bounds. Every error wraps ErrForeign.
func decode(blob []byte) (State, error) {
	if len(blob) > maxFileBytes {
		return nil, fmt.Errorf("%w: %d bytes, more than the %d a kubelet writes", ErrForeign, len(blob), maxFileBytes)
	}
	var raw file
	if err := json.Unmarshal(blob, &raw); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrForeign, err)
	}
	switch {
	case raw.Kind != kind:
		return nil, fmt.Errorf("%w: kind %q", ErrForeign, raw.Kind)
	case raw.Version != Version:
		return nil, fmt.Errorf("%w: version %d, this kubelet reads version %d", ErrForeign, raw.Version, Version)
	case crc32Of(raw.State) != raw.Checksum:
		return nil, fmt.Errorf("%w: checksum mismatch", ErrForeign)
	}
	if err := count(raw.State); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrForeign, err)
	}
	var s State
	if err := json.Unmarshal(raw.State, &s); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrForeign, err)
	}
	return s, nil
}

// within checks counts of records and victims against the bounds.
func within(preemptions, victims int) error {
	switch {
	case preemptions > maxPreemptions:
		return fmt.Errorf("more than %d preemptions", maxPreemptions)
	case victims > maxVictims:
		return fmt.Errorf("more than %d victims", maxVictims)
	}
	return nil
}

// count walks the state's JSON, before it is decoded, counting its records
// and their victims, and stops at the first bound passed: decoding first
// would allocate for every element however many there are. What is not an
// array of records is not counted: the decoder accepts it (null) or
// refuses it.
func count(state []byte) error {
	dec := json.NewDecoder(bytes.NewReader(state))
	var preemptions, victims int
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return nil
	}
	for dec.More() {
		if preemptions++; preemptions > maxPreemptions {
			return within(preemptions, victims)
		}
		tok, err := dec.Token()
		if err != nil || tok != json.Delim('{') {
			if tok == nil && err == nil { // a null record decodes, empty
				continue
			}
			return nil
		}
		for dec.More() {
			key, err := dec.Token()
			if err != nil {
				return nil
			}
			// The decoder matches field names without regard to case;
			// so does the count.
			if name, _ := key.(string); !strings.EqualFold(name, "victims") {
				if !skip(dec) {
					return nil
				}
				continue
			}
			tok, err := dec.Token()
			if err != nil || tok != json.Delim('[') {
				if tok == nil && err == nil { // no victims
					continue
				}
				return nil
			}
			for dec.More() {
				if victims++; victims > maxVictims {
					return within(preemptions, victims)
				}
				if !skip(dec) {
					return nil
				}
			}
			if _, err := dec.Token(); err != nil { // the victims' ]
				return nil
			}
		}
		if _, err := dec.Token(); err != nil { // the record's }
			return nil
		}
	}
	return nil
}

// skip reads past the next value, reporting whether there was one.
func skip(dec *json.Decoder) bool {
	var v json.RawMessage
	return dec.Decode(&v) == nil
}

func crc32Of(b []byte) uint32 { return crc32.Checksum(b, crc) }

package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
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
// another kind or version, or failing its checksum.
var ErrForeign = errors.New("not a checkpoint this kubelet can trust")

// document is upstream checkpointmanager's view of a checkpoint.
type document struct {
	state State
	raw   file
}

func (d *document) MarshalCheckpoint() ([]byte, error) {
	state, err := json.Marshal(d.state)
	if err != nil {
		return nil, fmt.Errorf("encoding preemptions: %w", err)
	}
	return json.Marshal(file{Kind: kind, Version: Version, State: state, Checksum: crc32Of(state)})
}

func (d *document) UnmarshalCheckpoint(blob []byte) error {
	if err := json.Unmarshal(blob, &d.raw); err != nil {
		return fmt.Errorf("%w: %w", ErrForeign, err)
	}
	return nil
}

// VerifyChecksum also decodes the state once it is known to be whole.
func (d *document) VerifyChecksum() error {
	switch {
	case d.raw.Kind != kind:
		return fmt.Errorf("%w: kind %q", ErrForeign, d.raw.Kind)
	case d.raw.Version != Version:
		return fmt.Errorf("%w: version %d, this kubelet reads version %d", ErrForeign, d.raw.Version, Version)
	case crc32Of(d.raw.State) != d.raw.Checksum:
		return fmt.Errorf("%w: checksum mismatch", ErrForeign)
	}
	if err := json.Unmarshal(d.raw.State, &d.state); err != nil {
		return fmt.Errorf("%w: %w", ErrForeign, err)
	}
	return nil
}

func crc32Of(b []byte) uint32 { return crc32.Checksum(b, crc) }

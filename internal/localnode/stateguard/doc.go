// Package stateguard guards what a local node, running as root, trusts and
// removes. Its state directory is used only when nobody but root can change
// what its path names (Trust, Check), and is written and emptied through the
// directory opened once checked, never through a link (Dir). What the node
// creates is recorded before it is made (the manifest), and Down removes that
// and nothing else. A claim marks a directory as a node's (Claim) and the
// host's fixed-name resources as one node's (Host), and a host-wide lock
// serialises every node's Up and Down (Host.WithLock).
package stateguard

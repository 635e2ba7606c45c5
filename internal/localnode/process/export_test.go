package process

import "os"

// ChildAt is childAt, for the tests outside the package.
func (r Ref) ChildAt(rdir *os.File, pid int) (Ref, error) { return r.childAt(rdir, pid) }

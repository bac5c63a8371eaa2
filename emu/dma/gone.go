package dma

import "errors"

// ErrSpaceGone is wrapped (beside unix.EFAULT) by the errors of a Space
// whose owner has exited while its memory regions are still registered: a
// daemon reaching a killed client's memory before it has seen the
// client's end. In the kernel the pages an MR pinned outlive the process
// until the MR is deregistered, so a device's writes to them still
// succeed; a driver treats a write that fails with ErrSpaceGone as done.
var ErrSpaceGone = errors.New("the address space's owner is gone")

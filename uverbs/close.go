//go:build linux

package uverbs

import (
	"errors"
	"slices"

	"github.com/softroce/softroce/emu"
)

// Disassociate is what the kernel does to an open file of a device that
// is removed under a driver with disassociate_ucontext
// (ib_uverbs_free_hw_resources): IB_EVENT_DEVICE_FATAL (element 0) on the
// file's async event file, then its objects destroyed as at Close
// (RDMA_REMOVE_DRIVER_REMOVE), after which every command fails with EIO.
// The client keeps its descriptors: the event is read before the end of
// its async event file.
func (f *File) Disassociate() error {
	if async := f.async.Load(); async != nil {
		async.sendAsync(0, uint32(emu.EventDeviceFatal), nil)
	}
	return f.Close()
}

// Close is the last close of the file (ib_uverbs_close,
// uverbs_destroy_ufile_hw): every object the client created is destroyed,
// newest first, and passes repeat while an object still in use by another
// (a CQ under a QP) refuses, so the kernel's dependency order falls out.
// QPs are destroyed in whatever state they are: a connected peer sees
// what it sees when a process with a live rxe QP exits (its packets go
// unanswered, its retries run out). The event files and rings go last. A
// second Close does nothing.
func (f *File) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	f.checkClose()
	defer f.check.Release()
	// uverbs_free_qp at close: every group each QP joined is left
	// (ib_uverbs_detach_umcast), and what the device no longer holds is
	// forgotten (emu.QP.ForgetMcast), so that the QP can go.
	for _, o := range f.objects {
		if o.kind == kindQP {
			o.qp.detachAll()
			o.qp.qp.ForgetMcast()
		}
	}
	var errs []error
	for len(f.objects) > 0 {
		handles := make([]uint32, 0, len(f.objects))
		for h := range f.objects {
			handles = append(handles, h)
		}
		slices.Sort(handles)
		slices.Reverse(handles)
		progress := false
		errs = errs[:0]
		for _, h := range handles {
			if err := f.destroy(f.objects[h]); err != nil {
				errs = append(errs, err)
				continue
			}
			progress = true
		}
		if !progress {
			break
		}
	}
	unwatchPorts(f)
	if a := f.async.Swap(nil); a != nil {
		a.close()
	}
	for _, ev := range f.channels {
		ev.close()
	}
	f.channels = nil
	for _, ev := range f.asyncMore {
		ev.close()
	}
	f.asyncMore = nil
	for off, q := range f.mmaps {
		q.close()
		delete(f.mmaps, off)
	}
	return errors.Join(errs...)
}

// destroy destroys one object of any kind; f.mu held.
func (f *File) destroy(o *object) error {
	switch o.kind {
	case kindQP:
		return f.destroyQP(o)
	case kindCQ:
		return f.destroyCQ(o)
	case kindSRQ:
		return f.destroySRQ(o)
	case kindAH:
		return f.destroyAH(o)
	case kindMR:
		if err := o.mr.DeregUser(&emu.UData{}); err != nil {
			return wrap("dereg MR", err)
		}
	case kindMW:
		if err := o.mw.Dealloc(); err != nil {
			return wrap("dealloc MW", err)
		}
	case kindPD:
		if err := o.pd.DeallocUser(&emu.UData{}); err != nil {
			return wrap("dealloc PD", err)
		}
	}
	delete(f.objects, o.handle)
	return nil
}

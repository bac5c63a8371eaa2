package coverage

import (
	"fmt"
	"sync"

	"github.com/softroce/softroce/emu"
)

// Collector holds the recorders of one run's devices (a daemon's, or
// loopback's two) and makes one profile of them: one run, the devices'
// cells summed. It is safe for concurrent use.
type Collector struct {
	mu   sync.Mutex
	recs map[string]*Recorder
}

// NewCollector returns a collector with no device.
func NewCollector() *Collector { return &Collector{recs: map[string]*Recorder{}} }

// Recorder returns the recorder of the device called name, made on first
// use: set it in that device's emu.Config.Recorder.
func (c *Collector) Recorder(name string) *Recorder {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.recs[name]
	if !ok {
		r = NewRecorder(name)
		c.recs[name] = r
	}
	return r
}

// ReadCounters reads the transport counters of d into its recorder
// (Recorder.ReadCounters); d must have been given Recorder(d.Name()).
// Call it before the device goes away.
func (c *Collector) ReadCounters(d *emu.Device) error {
	c.mu.Lock()
	r, ok := c.recs[d.Name()]
	c.mu.Unlock()
	if !ok {
		return fmt.Errorf("coverage: no recorder for device %s", d.Name())
	}
	return r.ReadCounters(d)
}

// Profile returns the merge of the devices' profiles as one run.
func (c *Collector) Profile() *Profile {
	c.mu.Lock()
	defer c.mu.Unlock()
	var p Profile
	for _, r := range c.recs {
		p.Merge(r.Profile())
	}
	p.Runs = 1
	return &p
}

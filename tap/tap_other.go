//go:build !linux

package tap

// Open fails: TAP devices are supported on Linux only.
func Open(name string, cfg *Config) (*Device, error) {
	return nil, unsupported("TAP devices need Linux")
}

// OpenPacket fails: AF_PACKET sockets are supported on Linux only.
func OpenPacket(iface string, cfg *Config) (*Device, error) {
	return nil, unsupported("AF_PACKET sockets need Linux")
}

// WatchCarrier fails: link notifications are watched on Linux only.
func (d *Device) WatchCarrier(f func(up, carrier bool)) (stop func(), err error) {
	return nil, unsupported("link notifications need Linux")
}

// ReadReady reports false: no queue is ever open here.
func (d *Device) ReadReady() bool { return false }

// ReadReady reports false: no queue is ever open here.
func (q *Queue) ReadReady() bool { return false }

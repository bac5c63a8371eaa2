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

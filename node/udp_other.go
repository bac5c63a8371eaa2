//go:build !linux

package node

import (
	"errors"
	"net/netip"
)

func watchAddrs(u *udpNode, changed func()) (stop func(), err error) {
	return nil, errors.ErrUnsupported
}

func routeTo(ip netip.Addr) error { return nil }

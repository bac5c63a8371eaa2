package debroot

// TrixieRDMA is the Debian 13 ("trixie") RDMA userspace: glibc,
// rdma-core 56 (libibverbs, the providers including librxe, the
// ibv_* tools, librdmacm and its tools) and perftest 25.01.
func TrixieRDMA() Config {
	return Config{
		Suite: "trixie",
		Packages: []string{
			"libc6", "libibverbs1", "ibverbs-providers", "ibverbs-utils",
			"librdmacm1t64", "rdmacm-utils", "perftest",
		},
	}
}

// TrixiePeer is the Debian 13 userspace of a kernel rxe peer: TrixieRDMA
// and the network tools the peer image carries (iproute2's ip and rdma,
// tcpdump).
func TrixiePeer() Config {
	c := TrixieRDMA()
	c.Packages = append(c.Packages, "iproute2", "tcpdump", "libgcc-s1")
	return c
}

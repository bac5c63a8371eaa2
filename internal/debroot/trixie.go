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

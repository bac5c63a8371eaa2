package debroot

// ForkyRDMA is the Debian 14 ("forky") RDMA userspace: glibc 2.43,
// rdma-core 65 (libibverbs, the providers including librxe, the ibv_*
// tools, librdmacm and its tools, pyverbs with rdma-core's test suite on
// python3.14), perftest, iproute2 and coreutils (the suite runs `rdma
// link`, `ip addr` and `cat`). rdma-core itself (its daemons, udev rules and systemd
// units, which python3-pyverbs depends on and a tree has no use for, and
// which bring udev and systemd) is left out.
func ForkyRDMA() Config {
	return Config{
		Suite: "forky",
		Packages: []string{
			"libc6", "libibverbs1", "ibverbs-providers", "ibverbs-utils",
			"librdmacm1t64", "rdmacm-utils", "perftest", "python3-pyverbs", "iproute2", "coreutils",
		},
		Omit: []string{"rdma-core"},
	}
}

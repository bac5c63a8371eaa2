module github.com/softroce/softroce

go 1.26.8

require (
	github.com/google/gopacket v1.1.19
	github.com/vishvananda/netlink v1.3.1
	github.com/vishvananda/netns v0.0.5
	golang.org/x/sys v0.50.0
	gopkg.in/yaml.v3 v3.0.1
)

require golang.org/x/net v0.0.0-20190620200207-3b0461eec859 // indirect

module github.com/softroce/softroce

go 1.26.8

require github.com/google/gopacket v1.1.19

require (
	github.com/vishvananda/netlink v1.3.1 // indirect
	github.com/vishvananda/netns v0.0.5 // indirect
	golang.org/x/net v0.0.0-20190620200207-3b0461eec859 // indirect
	golang.org/x/sys v0.50.0
)

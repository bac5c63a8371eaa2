/*
 * verbs_rxe_ops: drives the verbs rxe has beyond the pingpongs
 * through the distribution's libibverbs and librxe on the first device
 * (or argv[1]) and checks the kernel's answers. Run unprivileged through
 * `softroce run`; the device needs an IPv4 address at GID index 1.
 *
 *   resize:  ibv_resize_cq below the unpolled completions (EINVAL), of 0
 *            (EINVAL), then up: the flushed completions come out of the
 *            new ring in order and traffic completes on it; down to 1.
 *   srq:     ibv_modify_srq resizes an SRQ (below the posted WRs EINVAL);
 *            the WRs posted before move to the new ring, in order.
 *   rereg:   ibv_rereg_mr stops in librxe (no rereg_mr: EOPNOTSUPP, as
 *            on kernel rxe); the REREG_MR command itself (the flags are the
 *            kernel's IB_MR_REREG_* values), written to the
 *            command fd as libibverbs writes commands: no flags EINVAL, a
 *            new range EOPNOTSUPP, remote write without local write
 *            EINVAL, an access change the peer's RDMA WRITE then uses
 *            with the keys unchanged, a PD change that holds the new PD.
 *   pin:     ibv_reg_mr pins as ib_umem_get does: of PROT_READ memory
 *            with an access that lets the MR be written EFAULT, read-only
 *            fine; of PROT_NONE or unmapped memory EFAULT; REREG_MR of a
 *            read-only MR to remote write EACCES.
 *   mw:      ibv_alloc_mw, ibv_bind_mw (IBV_WC_BIND_MW), an RDMA WRITE
 *            through the window's new rkey, ibv_dealloc_mw.
 *   wr:      the extended post-send API (ibv_create_qp_ex with send ops,
 *            ibv_wr_start, ibv_wr_rdma_write, ibv_wr_rdma_read,
 *            ibv_wr_send, ibv_wr_atomic_write, ibv_wr_complete) librxe
 *            implements.
 *   mcast:   ibv_attach_mcast of a UD QP (twice), of an RC QP (EINVAL);
 *            ibv_detach_mcast of a group not attached (EINVAL);
 *            ibv_destroy_qp while attached (EBUSY); a UD SEND to an IPv4
 *            group reaches the attached QP, and no longer once detached.
 *
 *   gid:     ibv_query_gid_table and ibv_query_gid_ex (the entries,
 *            ENODATA for an unused slot, EINVAL for too small a table).
 *   sysfs:   the kernel's sysfs paths of the device read as the tree's.
 *   fdflags: the descriptors' file flags as F_GETFL reports them on
 *            the kernel's files: the command fd O_RDWR with O_LARGEFILE
 *            (librxe's open), the async event fd and a completion
 *            channel's O_RDONLY (anonymous inodes opened read-only); the
 *            command fd made O_NONBLOCK, and every check after runs on
 *            it: the kernel's write() of a command is synchronous.
 *
 * Prints "ok NAME" per check and exits 0, or "FAIL NAME: why" and 1.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/mman.h>
#include <infiniband/verbs.h>
#include <rdma/ib_user_verbs.h>

#include "verbs.h"

/* rereg_cmd writes the REREG_MR command to the command fd as libibverbs
 * writes its commands; it returns 0 or the errno. */
static int rereg_cmd(struct ibv_mr *mr, uint32_t flags, uint64_t start, uint64_t length,
		     uint32_t pd_handle, uint32_t access, struct ib_uverbs_rereg_mr_resp *resp)
{
	struct {
		struct ib_uverbs_cmd_hdr hdr;
		struct ib_uverbs_rereg_mr cmd;
	} req;

	memset(&req, 0, sizeof(req));
	memset(resp, 0, sizeof(*resp));
	req.hdr.command = IB_USER_VERBS_CMD_REREG_MR;
	req.hdr.in_words = sizeof(req) / 4;
	req.hdr.out_words = sizeof(*resp) / 4;
	req.cmd.response = (uintptr_t)resp;
	req.cmd.mr_handle = mr->handle;
	req.cmd.flags = flags;
	req.cmd.start = start;
	req.cmd.length = length;
	req.cmd.hca_va = start;
	req.cmd.pd_handle = pd_handle;
	req.cmd.access_flags = access;
	if (write(ctx->cmd_fd, &req, sizeof(req)) != sizeof(req))
		return errno;
	return 0;
}

int main(int argc, char **argv)
{
	struct ibv_pd *pd, *pd2;
	struct ibv_cq *cq;
	struct ibv_qp *a, *b, *qerr, *ud, *rc;
	struct ibv_mr *amr, *bmr;
	struct ibv_wc wc[32];
	char *abuf, *bbuf;
	int n, i, err;

	setvbuf(stdout, NULL, _IOLBF, 0);
	open_device(argc < 2 ? NULL : argv[1]);

	/* fdflags; 0100000 is the kernel's O_LARGEFILE, set on every file a
	 * 64-bit process opens (glibc's O_LARGEFILE is 0 there). */
	{
		struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
		MUST("create comp channel", ch);
		n = fcntl(ctx->cmd_fd, F_GETFL);
		CHECK("the command fd is O_RDWR|O_LARGEFILE", n == (O_RDWR | 0100000), "%#x", n);
		n = fcntl(ctx->async_fd, F_GETFL);
		CHECK("the async event fd is O_RDONLY", n == O_RDONLY, "%#x", n);
		n = fcntl(ch->fd, F_GETFL);
		CHECK("a completion channel's fd is O_RDONLY", n == O_RDONLY, "%#x", n);
		n = fcntl(ctx->cmd_fd, F_SETFL, O_NONBLOCK);
		CHECK("O_NONBLOCK on the command fd",
		      n == 0 && fcntl(ctx->cmd_fd, F_GETFL) == (O_RDWR | O_NONBLOCK | 0100000), "%d %#x", n,
		      fcntl(ctx->cmd_fd, F_GETFL));
		for (i = 0; i < 100; i++) {
			cq = ibv_create_cq(ctx, 4, NULL, ch, 0);
			if (!cq || ibv_destroy_cq(cq))
				break;
		}
		CHECK("verbs on the O_NONBLOCK command fd", i == 100, "CQ %d: errno %d", i, errno);
		MUST("destroy comp channel", !ibv_destroy_comp_channel(ch));
	}

	/* gid: the table of GID entries (libibverbs reads them from the
	 * sysfs tree: GID 0 the link-local address, GID 1 the IPv4 one). */
	{
		struct ibv_gid_entry ents[8], e;
		ssize_t k = ibv_query_gid_table(ctx, ents, 8, 0);
		CHECK("ibv_query_gid_table lists the device's 2 GIDs",
		      k == 2 && ents[1].gid_index == 1 && ents[1].gid_type == IBV_GID_TYPE_ROCE_V2, "%zd", k);
		err = ibv_query_gid_ex(ctx, 1, 1, &e, 0);
		CHECK("ibv_query_gid_ex of GID 1: RoCE v2, no kernel netdev",
		      err == 0 && e.gid_type == IBV_GID_TYPE_ROCE_V2 && e.ndev_ifindex == 0, "%d type %u ifindex %u", err,
		      e.gid_type, e.ndev_ifindex);
		err = ibv_query_gid_ex(ctx, 1, 7, &e, 0);
		CHECK("ibv_query_gid_ex of an unused slot is ENODATA", err == ENODATA, "%d", err);
		k = ibv_query_gid_table(ctx, ents, 1, 0);
		CHECK("ibv_query_gid_table with room for 1 is EINVAL", k == -EINVAL, "%zd", k);
	}

	/* sysfs: the kernel's paths of the device's attributes, which some
	 * libraries read themselves (UCX the GID types), are the tree's. */
	{
		char path[256], b[32];
		const char *dev = ibv_get_device_name(ctx->device);
		int fd;
		ssize_t k;

		snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/1/gid_attrs/types/1", dev);
		fd = open(path, O_RDONLY);
		k = fd < 0 ? -1 : read(fd, b, sizeof(b));
		CHECK("/sys/class/infiniband/DEV/ports/1/gid_attrs/types/1 reads RoCE v2",
		      k == 8 && !memcmp(b, "RoCE v2\n", 8), "fd %d read %zd errno %d", fd, k, errno);
		if (fd >= 0)
			close(fd);
		snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/1/gid_attrs/types/7", dev);
		fd = open(path, O_RDONLY);
		errno = 0;
		k = fd < 0 ? -2 : read(fd, b, sizeof(b));
		CHECK("the type of an unused GID slot fails its read: EINVAL", k == -1 && errno == EINVAL,
		      "fd %d read %zd errno %d", fd, k, errno);
		if (fd >= 0)
			close(fd);
		fd = open("/sys/class/infiniband_verbs/abi_version", O_RDONLY);
		k = fd < 0 ? -1 : read(fd, b, sizeof(b));
		CHECK("/sys/class/infiniband_verbs/abi_version reads 6", k == 2 && !memcmp(b, "6\n", 2), "fd %d read %zd",
		      fd, k);
		if (fd >= 0)
			close(fd);
	}

	pd = ibv_alloc_pd(ctx);
	MUST("alloc pd", pd);
	abuf = aligned_alloc(4096, 8192);
	bbuf = aligned_alloc(4096, 8192);
	MUST("buffers", abuf && bbuf);
	memset(abuf, 0, 8192);
	memset(bbuf, 0, 8192);
	amr = ibv_reg_mr(pd, abuf, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
			 IBV_ACCESS_MW_BIND);
	bmr = ibv_reg_mr(pd, bbuf, 8192, IBV_ACCESS_LOCAL_WRITE);
	MUST("reg mr", amr && bmr);

	/* resize */
	cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	MUST("create cq", cq);
	CHECK("create cq rounds 8 to 15", cq->cqe == 15, "cqe %d", cq->cqe);
	qerr = rc_qp(pd, cq);
	MUST("create qp", qerr);
	MUST("init", !to_init(qerr));
	for (i = 1; i <= 5; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)bbuf, .length = 16, .lkey = bmr->lkey };
		struct ibv_recv_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1 }, *bad;
		MUST("post recv", !ibv_post_recv(qerr, &wr, &bad));
	}
	{
		struct ibv_qp_attr e = { .qp_state = IBV_QPS_ERR };
		MUST("to ERR", !ibv_modify_qp(qerr, &e, IBV_QP_STATE));
	}
	err = ibv_resize_cq(cq, 4);
	CHECK("resize below the 5 unpolled completions is EINVAL", err == EINVAL, "%d (%s)", err, strerror(err));
	err = ibv_resize_cq(cq, 0);
	CHECK("resize to 0 is EINVAL", err == EINVAL, "%d (%s)", err, strerror(err));
	CHECK("a refused resize keeps cqe", cq->cqe == 15, "cqe %d", cq->cqe);
	err = ibv_resize_cq(cq, 100);
	CHECK("resize to 100", err == 0 && cq->cqe == 127, "%d (%s), cqe %d", err, strerror(err), cq->cqe);
	n = poll_n(cq, wc, 5);
	CHECK("the flushed completions moved to the new ring", n == 5, "polled %d", n);
	for (i = 0; i < n; i++)
		if (wc[i].wr_id != (uint64_t)i + 1 || wc[i].status != IBV_WC_WR_FLUSH_ERR)
			break;
	CHECK("in order, flushed", i == n, "completion %d: wr_id %llu status %s", i,
	      (unsigned long long)wc[i].wr_id, ibv_wc_status_str(wc[i].status));
	CHECK("nothing else", ibv_poll_cq(cq, 1, wc) == 0, "an extra completion");
	MUST("destroy qp", !ibv_destroy_qp(qerr));

	a = rc_qp(pd, cq);
	b = rc_qp(pd, cq);
	MUST("create qps", a && b);
	MUST("connect a", !connect_qp(a, b->qp_num));
	MUST("connect b", !connect_qp(b, a->qp_num));
	strcpy(bbuf, "through the resized ring");
	MUST("write a<-b", !post_write(b, 7, bmr, bbuf, 25, (uintptr_t)abuf, amr->rkey));
	n = poll_n(cq, wc, 1);
	CHECK("traffic completes on the resized CQ", n == 1 && wc[0].wr_id == 7 && wc[0].status == IBV_WC_SUCCESS &&
	      !strcmp(abuf, "through the resized ring"), "polled %d, status %s, data %.25s", n,
	      n ? ibv_wc_status_str(wc[0].status) : "-", abuf);
	err = ibv_resize_cq(cq, 1);
	CHECK("resize an empty CQ to 1", err == 0 && cq->cqe == 1, "%d (%s), cqe %d", err, strerror(err), cq->cqe);
	err = ibv_resize_cq(cq, 16);
	CHECK("and back to 16", err == 0 && cq->cqe == 31, "%d (%s), cqe %d", err, strerror(err), cq->cqe);

	/* srq */
	{
		struct ibv_srq_init_attr sa = { .attr = { .max_wr = 4, .max_sge = 1 } };
		struct ibv_srq *srq = ibv_create_srq(pd, &sa);
		struct ibv_qp_init_attr qa = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
			.cap = { .max_send_wr = 16, .max_send_sge = 1 } };
		struct ibv_qp *sender, *receiver;
		struct ibv_srq_attr attr;
		int in_order = 1;

		MUST("create srq", srq);
		qa.srq = srq;
		receiver = ibv_create_qp(pd, &qa);
		sender = rc_qp(pd, cq);
		MUST("create srq qps", receiver && sender);
		for (i = 0; i < 3; i++) {
			struct ibv_sge sge = { .addr = (uintptr_t)bbuf + 4096 + 64 * i, .length = 64, .lkey = bmr->lkey };
			struct ibv_recv_wr wr = { .wr_id = 40 + i, .sg_list = &sge, .num_sge = 1 }, *bad;
			MUST("post srq recv", !ibv_post_srq_recv(srq, &wr, &bad));
		}
		attr.max_wr = 1;
		err = ibv_modify_srq(srq, &attr, IBV_SRQ_MAX_WR);
		CHECK("ibv_modify_srq below the 3 posted WRs is EINVAL", err == EINVAL, "%d (%s)", err, strerror(err));
		attr.max_wr = 64;
		err = ibv_modify_srq(srq, &attr, IBV_SRQ_MAX_WR);
		CHECK("ibv_modify_srq resizes", err == 0, "%d (%s)", err, strerror(err));
		err = ibv_query_srq(srq, &attr);
		CHECK("ibv_query_srq has the new size", err == 0 && attr.max_wr == 127, "%d, max_wr %u", err,
		      attr.max_wr);
		for (i = 3; i < 6; i++) {
			struct ibv_sge sge = { .addr = (uintptr_t)bbuf + 4096 + 64 * i, .length = 64, .lkey = bmr->lkey };
			struct ibv_recv_wr wr = { .wr_id = 40 + i, .sg_list = &sge, .num_sge = 1 }, *bad;
			MUST("post srq recv after the resize", !ibv_post_srq_recv(srq, &wr, &bad));
		}
		MUST("connect sender", !connect_qp(sender, receiver->qp_num));
		MUST("connect receiver", !connect_qp(receiver, sender->qp_num));
		for (i = 0; i < 6; i++) {
			struct ibv_sge sge = { .addr = (uintptr_t)abuf + 4096, .length = 8, .lkey = amr->lkey };
			struct ibv_send_wr wr = { .wr_id = 50 + i, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				.send_flags = IBV_SEND_SIGNALED }, *bad;
			MUST("post send to the srq", !ibv_post_send(sender, &wr, &bad));
		}
		n = poll_n(cq, wc, 12);
		for (i = 0, err = 40; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS)
				in_order = 0;
			if (wc[i].opcode == IBV_WC_RECV && wc[i].wr_id != (uint64_t)err++)
				in_order = 0;
		}
		CHECK("the SRQ's WRs, from before and after the resize, in order", n == 12 && in_order && err == 46,
		      "polled %d, in order %d, next %d", n, in_order, err);
		MUST("destroy srq qps", !ibv_destroy_qp(receiver) && !ibv_destroy_qp(sender));
		MUST("destroy srq", !ibv_destroy_srq(srq));
	}

	/* rereg */
	{
		struct ib_uverbs_rereg_mr_resp resp;
		uint32_t lkey = bmr->lkey, rkey = bmr->rkey;

		errno = 0;
		err = ibv_rereg_mr(bmr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
				   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
		CHECK("ibv_rereg_mr stops in librxe (no rereg_mr)", err == IBV_REREG_MR_ERR_CMD && errno == EOPNOTSUPP,
		      "%d errno %d (%s)", err, errno, strerror(errno));
		err = rereg_cmd(bmr, 0, 0, 0, 0, 0, &resp);
		CHECK("REREG_MR without flags is EINVAL", err == EINVAL, "%d (%s)", err, strerror(err));
		err = rereg_cmd(bmr, IBV_REREG_MR_CHANGE_TRANSLATION, (uintptr_t)bbuf, 4096, 0, 0, &resp);
		CHECK("REREG_MR of the range is EOPNOTSUPP (rxe)", err == EOPNOTSUPP, "%d (%s)", err, strerror(err));
		err = rereg_cmd(bmr, IBV_REREG_MR_CHANGE_ACCESS, 0, 0, 0, IBV_ACCESS_REMOTE_WRITE, &resp);
		CHECK("REREG_MR to remote write without local write is EINVAL", err == EINVAL, "%d (%s)", err,
		      strerror(err));
		err = rereg_cmd(bmr, IBV_REREG_MR_CHANGE_ACCESS, 0, 0, 0, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
				&resp);
		CHECK("REREG_MR of the access keeps the keys", err == 0 && resp.lkey == lkey && resp.rkey == rkey,
		      "%d (%s), keys %#x/%#x were %#x/%#x", err, strerror(err), resp.lkey, resp.rkey, lkey, rkey);
		strcpy(abuf + 4096, "reregistered");
		MUST("write b<-a", !post_write(a, 8, amr, abuf + 4096, 13, (uintptr_t)bbuf + 64, rkey));
		n = poll_n(cq, wc, 1);
		CHECK("a peer writes through the new access", n == 1 && wc[0].status == IBV_WC_SUCCESS &&
		      !strcmp(bbuf + 64, "reregistered"), "polled %d, status %s, data %.13s", n,
		      n ? ibv_wc_status_str(wc[0].status) : "-", bbuf + 64);
		pd2 = ibv_alloc_pd(ctx);
		MUST("alloc pd2", pd2);
		err = rereg_cmd(bmr, IBV_REREG_MR_CHANGE_PD, 0, 0, pd2->handle, 0, &resp);
		CHECK("REREG_MR to another PD", err == 0, "%d (%s)", err, strerror(err));
		err = ibv_dealloc_pd(pd2);
		CHECK("the new PD holds the MR (EBUSY)", err == EBUSY, "%d (%s)", err, strerror(err));
		err = rereg_cmd(bmr, IBV_REREG_MR_CHANGE_PD, 0, 0, pd->handle, 0, &resp);
		CHECK("REREG_MR back", err == 0, "%d (%s)", err, strerror(err));
		err = ibv_dealloc_pd(pd2);
		CHECK("the other PD is free again", err == 0, "%d (%s)", err, strerror(err));
	}

	/* pin */
	{
		struct ib_uverbs_rereg_mr_resp resp;
		struct ibv_mr *mr;
		char *m = mmap(NULL, 4 * 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		MUST("mmap", m != MAP_FAILED);
		MUST("protect", !mprotect(m + 4096, 4096, PROT_READ | PROT_WRITE) &&
		     !munmap(m + 2 * 4096, 4096) && !mprotect(m + 3 * 4096, 4096, PROT_NONE));
		errno = 0;
		mr = ibv_reg_mr(pd, m, 4096, IBV_ACCESS_LOCAL_WRITE);
		CHECK("ibv_reg_mr of PROT_READ memory with local write is EFAULT", !mr && errno == EFAULT,
		      "mr %p errno %d (%s)", (void *)mr, errno, strerror(errno));
		errno = 0;
		mr = ibv_reg_mr(pd, m, 2 * 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
		CHECK("ibv_reg_mr of PROT_READ and read-write memory with remote write is EFAULT", !mr && errno == EFAULT,
		      "mr %p errno %d (%s)", (void *)mr, errno, strerror(errno));
		mr = ibv_reg_mr(pd, m + 4096, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
		CHECK("ibv_reg_mr of private read-write memory with remote write", mr != NULL, "errno %d (%s)", errno,
		      strerror(errno));
		if (mr)
			ibv_dereg_mr(mr);
		errno = 0;
		mr = ibv_reg_mr(pd, m + 3 * 4096, 4096, 0);
		CHECK("ibv_reg_mr of PROT_NONE memory is EFAULT", !mr && errno == EFAULT, "mr %p errno %d (%s)",
		      (void *)mr, errno, strerror(errno));
		errno = 0;
		mr = ibv_reg_mr(pd, m + 4096, 2 * 4096, 0);
		CHECK("ibv_reg_mr over an unmapped page is EFAULT", !mr && errno == EFAULT, "mr %p errno %d (%s)",
		      (void *)mr, errno, strerror(errno));
		mr = ibv_reg_mr(pd, m, 2 * 4096, IBV_ACCESS_REMOTE_READ);
		CHECK("ibv_reg_mr of PROT_READ memory read-only", mr != NULL, "errno %d (%s)", errno, strerror(errno));
		if (mr) {
			err = rereg_cmd(mr, IBV_REREG_MR_CHANGE_ACCESS, 0, 0, 0,
					IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, &resp);
			CHECK("REREG_MR of a read-only MR to remote write is EACCES", err == EACCES, "%d (%s)", err,
			      strerror(err));
			MUST("dereg pinned", !ibv_dereg_mr(mr));
		}
		munmap(m, 4 * 4096);
	}

	/* mw */
	{
		struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
		struct ibv_mw_bind bind = { .wr_id = 9, .send_flags = IBV_SEND_SIGNALED,
			.bind_info = { .mr = amr, .addr = (uintptr_t)abuf + 256, .length = 64,
				       .mw_access_flags = IBV_ACCESS_REMOTE_WRITE } };
		uint32_t old;

		CHECK("ibv_alloc_mw", mw != NULL, "%s", strerror(errno));
		if (mw) {
			old = mw->rkey;
			err = ibv_bind_mw(a, mw, &bind);
			n = err ? 0 : poll_n(cq, wc, 1);
			CHECK("ibv_bind_mw completes", n == 1 && wc[0].wr_id == 9 && wc[0].status == IBV_WC_SUCCESS &&
			      wc[0].opcode == IBV_WC_BIND_MW && mw->rkey != old, "%d, polled %d, status %s", err, n,
			      n ? ibv_wc_status_str(wc[0].status) : "-");
			strcpy(bbuf + 512, "in the window");
			MUST("write through the window", !post_write(b, 10, bmr, bbuf + 512, 14,
								     (uintptr_t)abuf + 256, mw->rkey));
			n = poll_n(cq, wc, 1);
			CHECK("an RDMA WRITE through the window's rkey", n == 1 && wc[0].status == IBV_WC_SUCCESS &&
			      !strcmp(abuf + 256, "in the window"), "polled %d, status %s", n,
			      n ? ibv_wc_status_str(wc[0].status) : "-");
			err = ibv_dealloc_mw(mw);
			CHECK("ibv_dealloc_mw", err == 0, "%d (%s)", err, strerror(err));
		}
	}

	/* wr */
	{
		struct ibv_qp_init_attr_ex xa = {
			.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC, .pd = pd,
			.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 },
			.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
			.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_SEND |
					  IBV_QP_EX_WITH_ATOMIC_WRITE,
		};
		struct ibv_qp *xq = ibv_create_qp_ex(ctx, &xa), *peer = rc_qp(pd, cq);
		struct ibv_qp_ex *qx;
		struct ibv_sge sge = { .addr = (uintptr_t)abuf + 3072, .length = 16, .lkey = amr->lkey };
		struct ibv_recv_wr rwr = { .wr_id = 32, .sg_list = &sge, .num_sge = 1 }, *bad;
		int seen = 0;

		CHECK("ibv_create_qp_ex with send ops", xq != NULL, "%s", strerror(errno));
		MUST("peer", peer);
		if (xq) {
			qx = ibv_qp_to_qp_ex(xq);
			MUST("connect the ex QP", !connect_qp(xq, peer->qp_num));
			MUST("connect its peer", !connect_qp(peer, xq->qp_num));
			MUST("post recv", !ibv_post_recv(peer, &rwr, &bad));
			strcpy(bbuf + 1024, "ibv_wr_rdma_write");
			strcpy(abuf + 2048, "ibv_wr_rdma_read");
			strcpy(bbuf + 3072, "ibv_wr_send");
			ibv_wr_start(qx);
			qx->wr_id = 30;
			qx->wr_flags = IBV_SEND_SIGNALED;
			ibv_wr_rdma_write(qx, amr->rkey, (uintptr_t)abuf + 1024);
			ibv_wr_set_sge(qx, bmr->lkey, (uintptr_t)bbuf + 1024, 18);
			qx->wr_id = 31;
			ibv_wr_rdma_read(qx, amr->rkey, (uintptr_t)abuf + 2048);
			ibv_wr_set_sge(qx, bmr->lkey, (uintptr_t)bbuf + 2048, 17);
			qx->wr_id = 33;
			ibv_wr_send(qx);
			ibv_wr_set_sge(qx, bmr->lkey, (uintptr_t)bbuf + 3072, 12);
			/* The 8 bytes travel in the WQE itself (no SGE). */
			qx->wr_id = 34;
			ibv_wr_atomic_write(qx, amr->rkey, (uintptr_t)abuf + 4096, "atomicwr");
			err = ibv_wr_complete(qx);
			CHECK("ibv_wr_complete", err == 0, "%d (%s)", err, strerror(err));
			n = poll_n(cq, wc, 5);
			for (i = 0; i < n; i++)
				if (wc[i].status == IBV_WC_SUCCESS)
					seen |= 1 << (wc[i].wr_id - 30);
			CHECK("ibv_wr_* work requests complete", n == 5 && seen == 0x1f, "polled %d, seen %#x", n, seen);
			CHECK("ibv_wr_rdma_write moved the data", !strcmp(abuf + 1024, "ibv_wr_rdma_write"), "%.18s",
			      abuf + 1024);
			CHECK("ibv_wr_rdma_read moved the data", !strcmp(bbuf + 2048, "ibv_wr_rdma_read"), "%.17s",
			      bbuf + 2048);
			CHECK("ibv_wr_send moved the data", !strcmp(abuf + 3072, "ibv_wr_send"), "%.12s", abuf + 3072);
			CHECK("ibv_wr_atomic_write stored its 8 bytes", !memcmp(abuf + 4096, "atomicwr", 8), "%.8s",
			      abuf + 4096);
			MUST("destroy the ex QP", !ibv_destroy_qp(xq));
		}
		MUST("destroy its peer", !ibv_destroy_qp(peer));
	}

	/* mcast */
	{
		struct ibv_qp_init_attr ua = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
			.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
		union ibv_gid g1, g2;

		ud = ibv_create_qp(pd, &ua);
		rc = rc_qp(pd, cq);
		MUST("create ud and rc qps", ud && rc);
		MUST("group 1", inet_pton(AF_INET6, "ff0e::1", g1.raw) == 1);
		MUST("group 2", inet_pton(AF_INET6, "ff0e::2", g2.raw) == 1);
		err = ibv_attach_mcast(ud, &g1, 0);
		CHECK("ibv_attach_mcast", err == 0, "%d (%s)", err, strerror(err));
		err = ibv_attach_mcast(ud, &g1, 0);
		CHECK("ibv_attach_mcast again", err == 0, "%d (%s)", err, strerror(err));
		err = ibv_attach_mcast(rc, &g1, 0);
		CHECK("ibv_attach_mcast of an RC QP is EINVAL", err == EINVAL, "%d (%s)", err, strerror(err));
		err = ibv_detach_mcast(ud, &g2, 0);
		CHECK("ibv_detach_mcast of a group not attached is EINVAL", err == EINVAL, "%d (%s)", err,
		      strerror(err));
		err = ibv_destroy_qp(ud);
		CHECK("ibv_destroy_qp while attached is EBUSY", err == EBUSY, "%d (%s)", err, strerror(err));
		if (err == EBUSY) {
			/* Otherwise the QP is gone. */
			err = ibv_detach_mcast(ud, &g1, 0);
			CHECK("ibv_detach_mcast", err == 0, "%d (%s)", err, strerror(err));
			err = ibv_destroy_qp(ud);
			CHECK("ibv_destroy_qp after the detach", err == 0, "%d (%s)", err, strerror(err));
		}
		MUST("destroy rc", !ibv_destroy_qp(rc));
	}

	/* mcast delivery */
	{
		struct ibv_qp_init_attr ua = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
			.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
		struct ibv_qp *qs[2];
		struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1, .grh = { .sgid_index = 1, .hop_limit = 64 } };
		struct ibv_sge rs = { .addr = (uintptr_t)bbuf + 6144, .length = 1024, .lkey = bmr->lkey };
		struct ibv_recv_wr rw = { .wr_id = 60, .sg_list = &rs, .num_sge = 1 }, *rbad;
		struct ibv_sge ss = { .addr = (uintptr_t)abuf + 6144, .length = 10, .lkey = amr->lkey };
		struct ibv_send_wr sw = { .wr_id = 61, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
			.send_flags = IBV_SEND_SIGNALED, .wr = { .ud = { .remote_qpn = 0xffffff, .remote_qkey = 0x11111111 } } },
			*sbad;
		struct ibv_ah *ah;
		int got_recv = 0;

		for (i = 0; i < 2; i++) {
			struct ibv_qp_attr x = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 0x11111111 };
			qs[i] = ibv_create_qp(pd, &ua);
			MUST("create ud qp", qs[i]);
			MUST("ud init", !ibv_modify_qp(qs[i], &x, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY));
			x.qp_state = IBV_QPS_RTR;
			MUST("ud rtr", !ibv_modify_qp(qs[i], &x, IBV_QP_STATE));
			x.qp_state = IBV_QPS_RTS;
			MUST("ud rts", !ibv_modify_qp(qs[i], &x, IBV_QP_STATE | IBV_QP_SQ_PSN));
		}
		MUST("ipv4 group", inet_pton(AF_INET6, "::ffff:239.1.1.1", aa.grh.dgid.raw) == 1);
		ah = ibv_create_ah(pd, &aa);
		MUST("group ah", ah);
		sw.wr.ud.ah = ah;
		err = ibv_attach_mcast(qs[1], &aa.grh.dgid, 0);
		CHECK("ibv_attach_mcast to ::ffff:239.1.1.1", err == 0, "%d (%s)", err, strerror(err));
		MUST("post ud recv", !ibv_post_recv(qs[1], &rw, &rbad));
		strcpy(abuf + 6144, "multicast");
		MUST("post ud send", !ibv_post_send(qs[0], &sw, &sbad));
		n = poll_n(cq, wc, 2);
		for (i = 0; i < n; i++)
			if (wc[i].wr_id == 60 && wc[i].status == IBV_WC_SUCCESS && wc[i].byte_len == 40 + 10 &&
			    !strcmp(bbuf + 6144 + 40, "multicast"))
				got_recv = 1;
		CHECK("a UD SEND to the group reaches the attached QP", n == 2 && got_recv, "polled %d, received %d", n,
		      got_recv);
		err = ibv_detach_mcast(qs[1], &aa.grh.dgid, 0);
		CHECK("ibv_detach_mcast of the group", err == 0, "%d (%s)", err, strerror(err));
		MUST("post ud recv", !ibv_post_recv(qs[1], &rw, &rbad));
		sw.wr_id = 62;
		MUST("post ud send", !ibv_post_send(qs[0], &sw, &sbad));
		n = poll_n(cq, wc, 1);
		usleep(300 * 1000);
		n += ibv_poll_cq(cq, 4, wc + n);
		CHECK("after the detach only the send completes", n == 1 && wc[0].wr_id == 62, "polled %d", n);
		MUST("destroy ah", !ibv_destroy_ah(ah));
		MUST("destroy ud qps", !ibv_destroy_qp(qs[0]) && !ibv_destroy_qp(qs[1]));
	}

	MUST("destroy a", !ibv_destroy_qp(a));
	MUST("destroy b", !ibv_destroy_qp(b));
	MUST("destroy cq", !ibv_destroy_cq(cq));
	MUST("dereg", !ibv_dereg_mr(amr) && !ibv_dereg_mr(bmr));
	MUST("dealloc pd", !ibv_dealloc_pd(pd));
	ibv_close_device(ctx);
	return failed;
}

// SPDX-License-Identifier: GPL-2.0
/*
 * vidmem.c - gpusim's video memory, charged to the cgroup dmem controller.
 *
 * The simulated GPU has GPUSIM_VIDMEM_BYTES of video memory.  Where the
 * kernel has the dmem controller (6.14+, CONFIG_CGROUP_DMEM), gpusim
 * registers it as one region named the way NVIDIA's r615+ driver names its
 * own, "nvidia/<pci bus id>/vidmem", with a made-up but well-formed bus id
 * (GPUSIM_PCI_BUS_ID: no device sits there in the lab's qemu guest).  Each
 * allocation is charged to the allocating task's cgroup with
 * dmem_cgroup_try_charge(); one the controller refuses (the cgroup or an
 * ancestor is at its dmem.max) fails with -ENOMEM, as an allocation past
 * dmem.max does on NVIDIA's driver.  On older kernels allocations are only
 * bounded by the device's size.
 *
 * gpusim.c includes this file.  debugfs /sys/kernel/debug/gpusim/vidmem
 * (see README.md): each open file is one GPU process's address space:
 *   write "alloc BYTES"  allocate and charge BYTES (-ENOMEM when refused)
 *   write "free"         free every allocation of this open file
 *   read                 "region NAME" (or "region none"), "device BYTES",
 *                        "used BYTES" (all files), "mine BYTES" (this file)
 * Closing the file frees its allocations, as a process's exit frees its GPU
 * memory.
 */
#include <linux/version.h>
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 14, 0)
#include <linux/cgroup_dmem.h>
#define GPUSIM_HAVE_DMEM IS_ENABLED(CONFIG_CGROUP_DMEM)
#else
#define GPUSIM_HAVE_DMEM 0
#endif

#define GPUSIM_VIDMEM_BYTES (1ULL << 30)
#define GPUSIM_PCI_BUS_ID "0000:ee:00.0"
#define GPUSIM_VIDMEM_REGION "nvidia/" GPUSIM_PCI_BUS_ID "/vidmem"
#define GPUSIM_VIDMEM_MAX_ALLOCS 1024 /* per open file */

struct gpusim_vidmem_alloc {
	struct list_head node;
	u64 bytes;
#if GPUSIM_HAVE_DMEM
	struct dmem_cgroup_pool_state *pool; /* the charged cgroup's pool */
#endif
};

struct gpusim_vidmem_file {
	struct list_head allocs;
	u32 nr;
	u64 bytes;
};

static DEFINE_MUTEX(gpusim_vidmem_lock);
static u64 gpusim_vidmem_used;
#if GPUSIM_HAVE_DMEM
static struct dmem_cgroup_region *gpusim_vidmem_region; /* NULL: not registered */
#endif

static bool gpusim_vidmem_has_region(void)
{
#if GPUSIM_HAVE_DMEM
	return gpusim_vidmem_region != NULL;
#else
	return false;
#endif
}

static int gpusim_vidmem_alloc(struct gpusim_vidmem_file *vf, u64 bytes)
{
	struct gpusim_vidmem_alloc *a;
	int err;

	if (!bytes || bytes > GPUSIM_VIDMEM_BYTES)
		return -EINVAL;
	if (vf->nr >= GPUSIM_VIDMEM_MAX_ALLOCS)
		return -ENOSPC;
	a = kzalloc(sizeof(*a), GFP_KERNEL);
	if (!a)
		return -ENOMEM;
	a->bytes = bytes;
	mutex_lock(&gpusim_vidmem_lock);
	if (gpusim_vidmem_used + bytes > GPUSIM_VIDMEM_BYTES) {
		err = -ENOMEM; /* the device is full */
		goto unlock;
	}
#if GPUSIM_HAVE_DMEM
	if (gpusim_vidmem_region) {
		/* -EAGAIN: over a dmem.max; a real driver may evict and retry, gpusim refuses */
		err = dmem_cgroup_try_charge(gpusim_vidmem_region, bytes, &a->pool, NULL);
		if (err == -EAGAIN)
			err = -ENOMEM;
		if (err)
			goto unlock;
	}
#endif
	gpusim_vidmem_used += bytes;
	list_add_tail(&a->node, &vf->allocs);
	vf->nr++;
	vf->bytes += bytes;
	err = 0;
unlock:
	mutex_unlock(&gpusim_vidmem_lock);
	if (err)
		kfree(a);
	return err;
}

static void gpusim_vidmem_free_all(struct gpusim_vidmem_file *vf)
{
	struct gpusim_vidmem_alloc *a, *tmp;

	mutex_lock(&gpusim_vidmem_lock);
	list_for_each_entry_safe(a, tmp, &vf->allocs, node) {
#if GPUSIM_HAVE_DMEM
		if (a->pool)
			dmem_cgroup_uncharge(a->pool, a->bytes);
#endif
		gpusim_vidmem_used -= a->bytes;
		list_del(&a->node);
		kfree(a);
	}
	vf->nr = 0;
	vf->bytes = 0;
	mutex_unlock(&gpusim_vidmem_lock);
}

static int gpusim_vidmem_open(struct inode *inode, struct file *f)
{
	struct gpusim_vidmem_file *vf = kzalloc(sizeof(*vf), GFP_KERNEL);

	if (!vf)
		return -ENOMEM;
	INIT_LIST_HEAD(&vf->allocs);
	f->private_data = vf;
	return 0;
}

static int gpusim_vidmem_release(struct inode *inode, struct file *f)
{
	struct gpusim_vidmem_file *vf = f->private_data;

	gpusim_vidmem_free_all(vf);
	kfree(vf);
	return 0;
}

static ssize_t gpusim_vidmem_write(struct file *f, const char __user *ubuf, size_t len, loff_t *ppos)
{
	struct gpusim_vidmem_file *vf = f->private_data;
	char buf[48], cmd[8];
	u64 bytes = 0;
	int n, err;

	err = gpusim_read_cmd(buf, sizeof(buf), ubuf, len);
	if (err)
		return err;
	n = sscanf(buf, "%7s %llu", cmd, &bytes);
	if (n == 2 && !strcmp(cmd, "alloc"))
		err = gpusim_vidmem_alloc(vf, bytes);
	else if (n == 1 && !strcmp(cmd, "free")) {
		gpusim_vidmem_free_all(vf);
		err = 0;
	} else {
		err = -EINVAL;
	}
	return err ?: len;
}

static ssize_t gpusim_vidmem_read(struct file *f, char __user *ubuf, size_t len, loff_t *ppos)
{
	struct gpusim_vidmem_file *vf = f->private_data;
	char buf[160];
	int n;

	mutex_lock(&gpusim_vidmem_lock);
	n = scnprintf(buf, sizeof(buf), "region %s\ndevice %llu\nused %llu\nmine %llu\n",
		      gpusim_vidmem_has_region() ? GPUSIM_VIDMEM_REGION : "none",
		      GPUSIM_VIDMEM_BYTES, gpusim_vidmem_used, vf->bytes);
	mutex_unlock(&gpusim_vidmem_lock);
	return simple_read_from_buffer(ubuf, len, ppos, buf, n);
}

static const struct file_operations gpusim_vidmem_fops = {
	.owner = THIS_MODULE,
	.open = gpusim_vidmem_open,
	.release = gpusim_vidmem_release,
	.read = gpusim_vidmem_read,
	.write = gpusim_vidmem_write,
};

static void gpusim_vidmem_init(struct dentry *dir)
{
#if GPUSIM_HAVE_DMEM
	struct dmem_cgroup_region *r;

	r = dmem_cgroup_register_region(GPUSIM_VIDMEM_BYTES, GPUSIM_VIDMEM_REGION);
	if (IS_ERR_OR_NULL(r))
		pr_warn("gpusim: dmem region %s not registered (%d)\n", GPUSIM_VIDMEM_REGION,
			PTR_ERR_OR_ZERO(r));
	else
		gpusim_vidmem_region = r;
#endif
	if (gpusim_vidmem_has_region())
		pr_info("gpusim: dmem region %s, %llu bytes\n", GPUSIM_VIDMEM_REGION, GPUSIM_VIDMEM_BYTES);
	else
		pr_info("gpusim: no dmem region (the kernel has no dmem controller)\n");
	debugfs_create_file("vidmem", 0600, dir, NULL, &gpusim_vidmem_fops);
}

/* Every vidmem file is closed by now: an open one holds a module reference (.owner). */
static void gpusim_vidmem_exit(void)
{
#if GPUSIM_HAVE_DMEM
	if (gpusim_vidmem_region)
		dmem_cgroup_unregister_region(gpusim_vidmem_region);
	gpusim_vidmem_region = NULL;
#endif
}

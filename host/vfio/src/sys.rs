// SPDX-License-Identifier: GPL-2.0
//! The parts of <linux/vfio.h> understudyd uses (the ABI is stable; writing
//! them out keeps the build free of bindgen and kernel headers).

pub const VFIO_API_VERSION: i32 = 0;
pub const VFIO_TYPE1V2_IOMMU: libc::c_ulong = 3;

const fn io(nr: u32) -> libc::c_ulong {
    // _IO(VFIO_TYPE, VFIO_BASE + nr): no direction or size bits.
    ((b';' as u32) << 8 | (100 + nr)) as libc::c_ulong
}

pub const VFIO_GET_API_VERSION: libc::c_ulong = io(0);
pub const VFIO_CHECK_EXTENSION: libc::c_ulong = io(1);
pub const VFIO_SET_IOMMU: libc::c_ulong = io(2);
pub const VFIO_GROUP_GET_STATUS: libc::c_ulong = io(3);
pub const VFIO_GROUP_SET_CONTAINER: libc::c_ulong = io(4);
pub const VFIO_GROUP_GET_DEVICE_FD: libc::c_ulong = io(6);
pub const VFIO_DEVICE_GET_INFO: libc::c_ulong = io(7);
pub const VFIO_DEVICE_GET_REGION_INFO: libc::c_ulong = io(8);
pub const VFIO_DEVICE_GET_IRQ_INFO: libc::c_ulong = io(9);
pub const VFIO_DEVICE_SET_IRQS: libc::c_ulong = io(10);
pub const VFIO_DEVICE_RESET: libc::c_ulong = io(11);
pub const VFIO_IOMMU_MAP_DMA: libc::c_ulong = io(13);
pub const VFIO_IOMMU_UNMAP_DMA: libc::c_ulong = io(14);

pub const VFIO_GROUP_FLAGS_VIABLE: u32 = 1;
pub const VFIO_DEVICE_FLAGS_RESET: u32 = 1;
pub const VFIO_DMA_MAP_FLAG_READ: u32 = 1;
pub const VFIO_DMA_MAP_FLAG_WRITE: u32 = 2;

pub const VFIO_PCI_CONFIG_REGION_INDEX: u32 = 7;
pub const VFIO_PCI_INTX_IRQ_INDEX: u32 = 0;
pub const VFIO_PCI_MSI_IRQ_INDEX: u32 = 1;
pub const VFIO_PCI_MSIX_IRQ_INDEX: u32 = 2;
/// The device request "interrupt": the kernel asks the user to release the
/// device (it is being unbound or hot-unplugged).
pub const VFIO_PCI_REQ_IRQ_INDEX: u32 = 4;

pub const VFIO_IRQ_SET_DATA_NONE: u32 = 1 << 0;
pub const VFIO_IRQ_SET_DATA_EVENTFD: u32 = 1 << 2;
pub const VFIO_IRQ_SET_ACTION_MASK: u32 = 1 << 3;
pub const VFIO_IRQ_SET_ACTION_TRIGGER: u32 = 1 << 5;

#[repr(C)]
#[derive(Default)]
pub struct GroupStatus {
    pub argsz: u32,
    pub flags: u32,
}

#[repr(C)]
#[derive(Default)]
pub struct DeviceInfo {
    pub argsz: u32,
    pub flags: u32,
    pub num_regions: u32,
    pub num_irqs: u32,
}

#[repr(C)]
#[derive(Default)]
pub struct RegionInfo {
    pub argsz: u32,
    pub flags: u32,
    pub index: u32,
    pub cap_offset: u32,
    pub size: u64,
    pub offset: u64,
}

#[repr(C)]
#[derive(Default)]
pub struct IrqInfo {
    pub argsz: u32,
    pub flags: u32,
    pub index: u32,
    pub count: u32,
}

/// `struct vfio_irq_set` without data (DATA_NONE).
#[repr(C)]
#[derive(Default)]
pub struct IrqSet {
    pub argsz: u32,
    pub flags: u32,
    pub index: u32,
    pub start: u32,
    pub count: u32,
}

/// `struct vfio_irq_set` with one eventfd (DATA_EVENTFD, count 1).
#[repr(C)]
#[derive(Default)]
pub struct IrqSetEventfd {
    pub argsz: u32,
    pub flags: u32,
    pub index: u32,
    pub start: u32,
    pub count: u32,
    pub fd: i32,
}

#[repr(C)]
#[derive(Default)]
pub struct DmaMap {
    pub argsz: u32,
    pub flags: u32,
    pub vaddr: u64,
    pub iova: u64,
    pub size: u64,
}

#[repr(C)]
#[derive(Default)]
pub struct DmaUnmap {
    pub argsz: u32,
    pub flags: u32,
    pub iova: u64,
    pub size: u64,
}

/// Sets `argsz` to the struct's size, as every VFIO ioctl expects.
pub fn sized<T: Default>(init: impl FnOnce(&mut T)) -> T {
    let mut v = T::default();
    init(&mut v);
    // SAFETY: every struct here starts with `u32 argsz`.
    unsafe { *(&mut v as *mut T).cast::<u32>() = std::mem::size_of::<T>() as u32 };
    v
}

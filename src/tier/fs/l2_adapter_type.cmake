# The fs L2 adapter type: one file per object under a directory; loads through
# io_uring where built with liburing (LMC_IO_URING) and allowed at run time.
if(LMC_IO_URING)
  set(LMC_FS_URING_SRCS tier/fs/uring_reads.cc)
  set(LMC_FS_URING_DEPS PkgConfig::LIBURING)
else()
  set(LMC_FS_URING_SRCS tier/fs/uring_reads_unavailable.cc)
  set(LMC_FS_URING_DEPS "")
endif()
lmc_l2_adapter_type(fs ALWAYS RegisterFsAdapterType
  SRCS tier/fs/fs_adapter.cc tier/fs/fs_adapter_type.cc tier/fs/fs_key_codec.cc
       ${LMC_FS_URING_SRCS}
  DEPS ${LMC_FS_URING_DEPS})

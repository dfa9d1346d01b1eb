# The s3 L2 adapter type (AWS S3, Ceph RGW, any S3-compatible store): built
# with LMC_L2_S3, the only part of the server that links libcurl.
lmc_l2_adapter_type(s3 LMC_L2_S3 RegisterS3AdapterType
  SRCS tier/s3/sigv4.cc tier/s3/s3_credentials.cc tier/s3/s3_object_name.cc tier/s3/s3_xml.cc
       tier/s3/s3_client.cc tier/s3/s3_object_receiver.cc tier/s3/s3_adapter.cc tier/s3/s3_adapter_type.cc
  DEPS CURL::libcurl OpenSSL::Crypto)

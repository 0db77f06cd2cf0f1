//! Images without a registry: [`oci`] writes small OCI image archives (busybox and a pause image from
//! Debian's `busybox-static`), [`import`] loads archives into containerd's `k8s.io` namespace.

pub mod import;
pub mod oci;

//! Images without a registry: [`oci`] writes small OCI image archives (busybox and a pause image from
//! Debian's `busybox-static`), [`import`] loads archives into containerd's `k8s.io` namespace, [`gc`]
//! removes unused images when the image filesystem fills up.

pub mod credentials;
pub mod gc;
pub mod import;
pub mod oci;

//! Images without a registry: [`oci`] writes small OCI image archives (busybox and a pause image from
//! Debian's `busybox-static`), [`import`] loads archives into containerd's `k8s.io` namespace, [`gc`]
//! removes unused images when the image filesystem fills up, [`mirrors`] points containerd at a site's
//! registry mirrors, and [`push`] puts images into such a registry.

pub mod credentials;
pub mod gc;
pub mod import;
pub mod mirrors;
pub mod oci;
pub mod push;

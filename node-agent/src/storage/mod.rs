//! Storage on the node: the built-in local-path provisioner ([`provisioner`]), which makes and removes
//! the directories behind `keel.io/local-path` volumes of this node.

pub mod provisioner;

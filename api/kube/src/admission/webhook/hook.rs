//! The webhooks the stored configurations register, read for each admission: configurations in name
//! order, each one's webhooks in the order it lists them.

use k8s_openapi::api::admissionregistration::v1::MutatingWebhook;
use serde_json::Value;
use tracing::debug;

use crate::storage::{prefix_end, Storage};

/// Which of the two webhook kinds a hook belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// MutatingWebhookConfiguration: called one after another, may patch.
    Mutating,
    /// ValidatingWebhookConfiguration: called together, may only refuse.
    Validating,
}

impl Phase {
    /// The `type` label upstream's webhook metrics use.
    pub fn metric_type(self) -> &'static str {
        match self {
            Phase::Mutating => "admit",
            Phase::Validating => "validating",
        }
    }

    fn prefix(self) -> &'static str {
        match self {
            Phase::Mutating => "/registry/mutatingwebhookconfigurations/",
            Phase::Validating => "/registry/validatingwebhookconfigurations/",
        }
    }
}

/// One registered webhook. Both kinds share a shape; validating ones have no reinvocation policy.
#[derive(Debug, Clone)]
pub struct Hook {
    /// The configuration it belongs to.
    pub configuration: String,
    /// The webhook as stored (defaulted).
    pub spec: MutatingWebhook,
}

impl Hook {
    /// The webhook's name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// Whether failures to call it let the request through.
    pub fn fails_open(&self) -> bool {
        self.spec.failure_policy.as_deref() == Some("Ignore")
    }

    /// Its timeout (defaulted to 10 s; the API keeps it within 1..=30).
    pub fn timeout_seconds(&self) -> u64 {
        self.spec
            .timeout_seconds
            .and_then(|t| u64::try_from(t).ok())
            .filter(|t| (1..=30).contains(t))
            .unwrap_or(10)
    }

    /// Whether it may be called again when later webhooks change the object.
    pub fn reinvoked_if_needed(&self) -> bool {
        self.spec.reinvocation_policy.as_deref() == Some("IfNeeded")
    }
}

/// The webhooks of `phase` now stored, in upstream's calling order.
pub fn load(storage: &Storage, phase: Phase) -> Vec<Hook> {
    let prefix = phase.prefix();
    let page = match storage.range(prefix.as_bytes(), &prefix_end(prefix.as_bytes()), 0, 0) {
        Ok(p) => p,
        Err(e) => {
            debug!(error = %e, "webhook configurations unreadable");
            return Vec::new();
        }
    };
    // Keys sort as names do, so the page is already in configuration-name order.
    let mut out = Vec::new();
    for (_, st) in page.items {
        let configuration = crate::object::name(&st.object).to_string();
        let hooks = st
            .object
            .get("webhooks")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for h in hooks {
            match serde_json::from_value::<MutatingWebhook>(h) {
                Ok(spec) => out.push(Hook {
                    configuration: configuration.clone(),
                    spec,
                }),
                Err(e) => debug!(%configuration, error = %e, "unreadable webhook skipped"),
            }
        }
    }
    out
}

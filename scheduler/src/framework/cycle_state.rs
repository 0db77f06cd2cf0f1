//! CycleState: what plugins compute once per scheduling cycle (in PreFilter or PreScore) and read for
//! every node. Preemption clones it per candidate node and lets plugins adjust their copy as victims
//! are taken away, so each entry must be cloneable.

use std::any::Any;
use std::collections::HashMap;

/// One plugin's per-cycle data.
pub trait StateData: Any + Send + Sync {
    /// A boxed copy.
    fn clone_data(&self) -> Box<dyn StateData>;
    /// For downcasting.
    fn as_any(&self) -> &dyn Any;
    /// For downcasting mutably.
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl<T: Any + Clone + Send + Sync> StateData for T {
    fn clone_data(&self) -> Box<dyn StateData> {
        Box::new(self.clone())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// The data of one scheduling cycle, keyed by plugin.
#[derive(Default)]
pub struct CycleState {
    data: HashMap<&'static str, Box<dyn StateData>>,
}

impl Clone for CycleState {
    fn clone(&self) -> Self {
        CycleState {
            data: self
                .data
                .iter()
                .map(|(k, v)| (*k, (**v).clone_data()))
                .collect(),
        }
    }
}

impl CycleState {
    /// Stores `value` under `key`, replacing what was there.
    pub fn write<T: StateData>(&mut self, key: &'static str, value: T) {
        self.data.insert(key, Box::new(value));
    }

    /// The value under `key`, if it has type `T`.
    pub fn read<T: 'static>(&self, key: &'static str) -> Option<&T> {
        self.data
            .get(key)
            .and_then(|v| (**v).as_any().downcast_ref::<T>())
    }

    /// The value under `key` for changing, if it has type `T`.
    pub fn read_mut<T: 'static>(&mut self, key: &'static str) -> Option<&mut T> {
        self.data
            .get_mut(key)
            .and_then(|v| (**v).as_any_mut().downcast_mut::<T>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_are_independent() {
        let mut a = CycleState::default();
        a.write("p", vec![1, 2]);
        let mut b = a.clone();
        if let Some(v) = b.read_mut::<Vec<i32>>("p") {
            v.push(3);
        }
        assert_eq!(a.read::<Vec<i32>>("p"), Some(&vec![1, 2]));
        assert_eq!(b.read::<Vec<i32>>("p"), Some(&vec![1, 2, 3]));
        assert!(a.read::<String>("p").is_none());
    }
}

//! [`MapTable`]: the plainest [`StateTable`], a `HashMap` that keeps every state forever. It
//! is the reference the stores are compared with (the Redis script must answer as
//! [`batch::decide`](super::batch::decide) on a `MapTable`), and what tests drive it with.

use std::collections::HashMap;

use super::batch::StateTable;
use crate::algorithm::State;
use crate::model::Micros;

/// States by key. Expiry is ignored: past its `expires_at` a state is equivalent to none
/// (see [`Outcome::expires_at`](crate::algorithm::Outcome::expires_at)).
#[derive(Clone, Debug, Default)]
pub struct MapTable(pub HashMap<Vec<u8>, State>);

impl StateTable for MapTable {
    fn get(&self, _: usize, key: &[u8]) -> Option<&State> {
        self.0.get(key)
    }
    fn put(&mut self, _: usize, key: &[u8], state: State, _: Micros, _: bool) {
        self.0.insert(key.to_vec(), state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::{Ask, Limit};
    use crate::store::{batch, Check};

    #[test]
    fn keeps_what_decide_charges() {
        let limit = Limit::fixed_window(1, 60_000_000).unwrap();
        let mut t = MapTable::default();
        let checks = [Check::new(b"k", &limit, Ask::take(1))];
        assert!(batch::decide(&mut t, &checks, 0)[0].allowed);
        assert!(t.get(0, b"k").is_some() && t.get(0, b"other").is_none());
        assert!(!batch::decide(&mut t, &checks, 1)[0].allowed);
    }
}

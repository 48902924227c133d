//! Exact under every clock and fault, black box on real `redis-server` processes (or Valkey's,
//! `SLUICE_REDIS_SERVER`): every test counts each answer into the window it was decided in and
//! asserts admitted ≤ limit per window and a stored count equal to what was admitted.
//!
//! `faults_clocks`: two sluice processes on one key with clocks apart (one run ahead under
//! libfaketime), and a key holding a later window than the deciding clock. `faults_failover`:
//! Sentinel and Cluster failovers under load. `faults_drops`: connections killed between any
//! two writes under reservations, settlements and refunds. `faults_support`: the processes,
//! the load and the tally they share.

mod faults_clocks;
mod faults_drops;
mod faults_failover;
mod faults_support;

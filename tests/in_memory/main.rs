//! The tests on in-memory nodes (`redquorum::testing`), with neither Redis
//! nor a network: one binary, a module per theme. Each module's own docs
//! say what it checks. (The simulation, the property tests of the quorum
//! arithmetic and the telemetry tests, which install a process-wide
//! recorder, are binaries of their own.)

#[path = "../support/mod.rs"]
mod support;

mod backpressure;
mod bounds;
mod cancellation;
mod election;
mod fencing_props;
mod lease_sim;
mod once_per_period;
mod quarantine_waits;
mod release_outcomes;
mod restarts;
mod secrets;
mod shutdown;
mod terms;
mod waiting;

//! The expansion names everything by absolute path: local items called
//! `core`, `resilience`, `Result`, `Duration` or `ControlFlow` change nothing.
#![deny(warnings)]
#![allow(dead_code, non_camel_case_types)]

mod core {}
mod resilience {}
mod tokio {}
struct Duration;
struct ControlFlow;
struct Clone;
trait Future {}
type Result<T> = ::std::result::Result<T, ::std::io::Error>;

#[::resilience::retry(max = 2, initial = "10ms")]
async fn get_user(id: u64) -> Result<u64> {
    Ok(id)
}

fn main() {
    let value = ::tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
        .block_on(get_user(3));
    assert_eq!(value.unwrap(), 3);
}

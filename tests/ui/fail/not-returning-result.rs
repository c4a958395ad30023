use resilience::retry;

#[retry]
async fn get_user(id: u64) -> Option<u64> {
    Some(id)
}

#[retry]
async fn get_nothing(id: u64) {
    let _ = id;
}

fn main() {}

use resilience::retry;

#[derive(Debug)]
struct Failed;
impl resilience::Classify for Failed {
    fn classify(&self) -> resilience::Verdict {
        resilience::Verdict::Transient
    }
}
impl From<resilience::Error> for Failed {
    fn from(_: resilience::Error) -> Self {
        Failed
    }
}

#[retry(budget = "")]
async fn get_with_an_empty_budget() -> Result<(), Failed> {
    Ok(())
}

#[retry(budget = user)]
async fn get_with_a_budget_not_a_string() -> Result<(), Failed> {
    Ok(())
}

fn main() {}

//! Counting the nodes' answers.

/// One node's answer.
pub(super) enum Answer {
    Yes,
    No(&'static str),
    Failed(String),
}

impl Answer {
    /// A node's answer to a 1/0 compare-and-act script (`0` = not the owner).
    pub(super) fn of_status(reply: crate::Result<i64>) -> Self {
        match reply {
            Ok(1) => Self::Yes,
            Ok(0) => Self::No("not owner"),
            Ok(other) => Self::Failed(format!("unexpected status {other}")),
            Err(e) => Self::Failed(e.to_string()),
        }
    }
}

/// Answers counted: agreed, refused, and every node that did not agree with its reason.
pub(super) struct Tally {
    pub(super) agreed: usize,
    pub(super) refused: usize,
    pub(super) failed: Vec<(usize, String)>,
}

impl Tally {
    pub(super) fn of(answers: Vec<Answer>) -> Self {
        let mut tally = Self {
            agreed: 0,
            refused: 0,
            failed: Vec::new(),
        };
        for (node, answer) in answers.into_iter().enumerate() {
            match answer {
                Answer::Yes => tally.agreed += 1,
                Answer::No(why) => {
                    tally.refused += 1;
                    tally.failed.push((node, why.to_owned()));
                }
                Answer::Failed(why) => tally.failed.push((node, why)),
            }
        }
        tally
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_agreement_and_names_every_other_node() {
        let tally = Tally::of(vec![
            Answer::Yes,
            Answer::No("held by another owner"),
            Answer::Failed("timed out".into()),
            Answer::Yes,
        ]);
        assert_eq!((tally.agreed, tally.refused), (2, 1));
        assert_eq!(
            tally.failed,
            vec![
                (1, "held by another owner".to_owned()),
                (2, "timed out".to_owned())
            ]
        );
    }
}

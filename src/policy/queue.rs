//! What a full GPU type costs a job in waiting: from the view's per-type queue (when each busy
//! GPU is expected to free, how much demand is already pending ahead), the expected time before a
//! newly submitted job would get a GPU of that type.
//!
//! Pure arithmetic on numbers the caller gathered (the plugin's snapshot thread from Slurm's job
//! and node tables, the simulator from its own state); no I/O.

/// One GPU type's queue as a snapshot saw it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TypeQueue {
    /// GPUs of this type in the cluster (up and schedulable).
    pub total_gpus: u32,
    /// GPUs of this type no job holds.
    pub idle_gpus: u32,
    /// The most GPUs of this type on one node: a job asking for more can never run here.
    pub max_gpus_per_node: u32,
    /// Seconds until each held GPU of this type is expected to free (a running job's time limit
    /// or predicted runtime, less what has elapsed), ascending.
    pub frees_in_s: Vec<f64>,
    /// GPUs of this type that pending jobs ahead of a new one are waiting for (a share counts
    /// as its fraction; a job offered several types counts a part on each).
    pub pending_gpus: f64,
    /// Mean time a GPU of this type stays held once a job takes it, for waits longer than one
    /// turnover of the type.
    pub mean_hold_s: f64,
}

impl TypeQueue {
    /// GPUs of this type idle beyond the demand waiting for it; negative when more is waiting
    /// than is idle.
    pub fn spare_gpus(&self) -> f64 {
        f64::from(self.idle_gpus) - self.pending_gpus
    }

    /// Demand waiting for this type beyond its idle GPUs (0 when the idle GPUs absorb it).
    pub fn backlog_gpus(&self) -> f64 {
        (-self.spare_gpus()).max(0.0)
    }

    /// Expected seconds before `gpus` GPUs of this type come to a job submitted now, when none is
    /// free for it now: it gets the GPUs that free after those the pending demand takes.
    /// `None` when nothing of this type will free (no GPU held, e.g. every node down).
    pub fn wait_s(&self, gpus: u32) -> Option<f64> {
        let n = self.frees_in_s.len();
        if n == 0 || gpus > self.max_gpus_per_node.max(1) {
            return None;
        }
        // Demand ahead that idle GPUs cannot absorb, plus this job's own GPUs.
        let ahead = self.backlog_gpus();
        // Bounded by the cast below: a queue of 2^31 GPUs is not a real cluster.
        let ahead = ahead.ceil().min(f64::from(i32::MAX));
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let k = ahead as usize + gpus as usize;
        let turns = (k - 1) / n;
        let at = (k - 1) % n;
        #[allow(clippy::cast_precision_loss)]
        let wait = self.frees_in_s[at] + turns as f64 * self.mean_hold_s.max(0.0);
        Some(wait.max(0.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(frees: &[f64], pending: f64) -> TypeQueue {
        TypeQueue {
            total_gpus: u32::try_from(frees.len()).expect("small"),
            idle_gpus: 0,
            max_gpus_per_node: 4,
            frees_in_s: frees.to_vec(),
            pending_gpus: pending,
            mean_hold_s: 1000.0,
        }
    }

    #[test]
    fn the_next_free_gpu_goes_to_the_demand_ahead_first() {
        let queue = q(&[10.0, 20.0, 30.0, 40.0], 0.0);
        assert_eq!(queue.wait_s(1), Some(10.0));
        assert_eq!(queue.wait_s(2), Some(20.0));
        let busy = q(&[10.0, 20.0, 30.0, 40.0], 2.0);
        assert_eq!(busy.wait_s(1), Some(30.0));
        // Half a GPU of pending shares still takes the next GPU that frees.
        assert_eq!(q(&[10.0, 20.0], 0.5).wait_s(1), Some(20.0));
    }

    #[test]
    fn demand_beyond_one_turnover_waits_for_the_next() {
        let queue = q(&[10.0, 20.0], 3.0);
        // Four GPUs wanted in all on two: the second turn of the first GPU.
        assert_eq!(queue.wait_s(1), Some(20.0 + 1000.0));
    }

    #[test]
    fn idle_gpus_absorb_pending_demand_and_oversized_jobs_never_fit() {
        let mut queue = q(&[50.0], 2.0);
        queue.idle_gpus = 2;
        assert_eq!(queue.wait_s(1), Some(50.0));
        assert_eq!(queue.wait_s(8), None, "no node has 8 GPUs of this type");
        assert_eq!(TypeQueue::default().wait_s(1), None);
    }
}

//! Classification metrics: accuracy, macro-F1 and Matthews correlation (multi-class).

/// The evaluation metrics of one pass over a labelled set.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EvalMetrics {
    /// Mean cross-entropy.
    pub loss: f64,
    /// Fraction of correct predictions.
    pub accuracy: f64,
    /// Unweighted mean of the per-class F1 scores (classes with no true and no predicted
    /// example count as 0, as scikit-learn does).
    pub macro_f1: f64,
    /// Matthews correlation coefficient, multi-class form (Gorodkin's R_K); 0 when undefined.
    pub mcc: f64,
}

impl EvalMetrics {
    /// Computes the metrics from predictions, gold labels and the summed loss.
    pub fn compute(predicted: &[usize], gold: &[usize], num_classes: usize, loss_sum: f64) -> Self {
        let n = gold.len();
        let confusion = confusion(predicted, gold, num_classes);
        let correct: usize = (0..num_classes).map(|k| confusion[k][k]).sum();
        EvalMetrics {
            loss: if n == 0 {
                f64::NAN
            } else {
                loss_sum / n as f64
            },
            accuracy: if n == 0 {
                0.0
            } else {
                correct as f64 / n as f64
            },
            macro_f1: macro_f1(&confusion),
            mcc: mcc(&confusion),
        }
    }

    /// The value of a metric by its protocol name.
    pub fn get(&self, metric: Metric) -> f64 {
        match metric {
            Metric::Accuracy => self.accuracy,
            Metric::MacroF1 => self.macro_f1,
            Metric::Mcc => self.mcc,
            Metric::Loss => self.loss,
        }
    }
}

/// The metrics a run can be tuned on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Metric {
    /// Accuracy (maximise).
    Accuracy,
    /// Macro-averaged F1 (maximise).
    #[value(name = "macro_f1", alias = "macro-f1")]
    MacroF1,
    /// Matthews correlation (maximise).
    Mcc,
    /// Evaluation loss (minimise).
    Loss,
}

impl Metric {
    /// The name used in reported lines and the metrics file.
    pub fn name(self) -> &'static str {
        match self {
            Metric::Accuracy => "accuracy",
            Metric::MacroF1 => "macro_f1",
            Metric::Mcc => "mcc",
            Metric::Loss => "loss",
        }
    }

    /// True when a larger value is better.
    pub fn maximize(self) -> bool {
        self != Metric::Loss
    }
}

/// `confusion[gold][predicted]` counts.
fn confusion(predicted: &[usize], gold: &[usize], k: usize) -> Vec<Vec<usize>> {
    let mut table = vec![vec![0usize; k]; k];
    for (&p, &g) in predicted.iter().zip(gold) {
        if p < k && g < k {
            table[g][p] += 1;
        }
    }
    table
}

fn macro_f1(c: &[Vec<usize>]) -> f64 {
    let k = c.len();
    if k == 0 {
        return 0.0;
    }
    let f1_sum: f64 = (0..k)
        .map(|class| {
            let tp = c[class][class] as f64;
            let predicted: f64 = (0..k).map(|g| c[g][class] as f64).sum();
            let actual: f64 = c[class].iter().sum::<usize>() as f64;
            if predicted + actual == 0.0 {
                0.0
            } else {
                2.0 * tp / (predicted + actual)
            }
        })
        .sum();
    f1_sum / k as f64
}

fn mcc(c: &[Vec<usize>]) -> f64 {
    let k = c.len();
    let s: f64 = c.iter().flatten().sum::<usize>() as f64;
    let correct: f64 = (0..k).map(|i| c[i][i] as f64).sum();
    let predicted: Vec<f64> = (0..k)
        .map(|j| (0..k).map(|i| c[i][j] as f64).sum())
        .collect();
    let actual: Vec<f64> = (0..k).map(|i| c[i].iter().sum::<usize>() as f64).collect();
    let pt: f64 = predicted.iter().zip(&actual).map(|(p, t)| p * t).sum();
    let numerator = correct * s - pt;
    let denominator = ((s * s - predicted.iter().map(|p| p * p).sum::<f64>())
        * (s * s - actual.iter().map(|t| t * t).sum::<f64>()))
    .sqrt();
    if denominator == 0.0 {
        0.0
    } else {
        numerator / denominator
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_metrics_match_scikit_learn() {
        // sklearn: accuracy 0.6, f1_score(average="macro") 0.5833..., matthews_corrcoef 0.1667
        let gold = [1, 1, 1, 0, 0];
        let predicted = [1, 1, 0, 1, 0];
        let m = EvalMetrics::compute(&predicted, &gold, 2, 2.5);
        assert!((m.accuracy - 0.6).abs() < 1e-12);
        assert!((m.macro_f1 - 0.583_333_333_333_333_4).abs() < 1e-12);
        assert!((m.mcc - 1.0 / 6.0).abs() < 1e-12);
        assert!((m.loss - 0.5).abs() < 1e-12);
    }

    #[test]
    fn multiclass_mcc_matches_scikit_learn() {
        // Gorodkin's R_K by hand: c=2 correct, s=6, sum(p*t)=12, sum(p^2)=14, sum(t^2)=12.
        let gold = [0, 1, 2, 0, 1, 2];
        let predicted = [0, 2, 1, 0, 0, 1];
        let m = EvalMetrics::compute(&predicted, &gold, 3, 0.0);
        let expected = (2.0 * 6.0 - 12.0) / ((36.0f64 - 14.0) * (36.0 - 12.0)).sqrt();
        assert!((m.mcc - expected).abs() < 1e-12);
        assert!((m.accuracy - 2.0 / 6.0).abs() < 1e-12);
    }

    #[test]
    fn constant_predictions_give_zero_mcc_not_nan() {
        let m = EvalMetrics::compute(&[1, 1, 1], &[0, 1, 1], 2, 0.0);
        assert_eq!(m.mcc, 0.0);
        assert!((m.macro_f1 - 0.4).abs() < 1e-12);
    }
}

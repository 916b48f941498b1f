// Image classification data a user brings: a folder in one of three layouts, images of any
// size and channel count, labels of any number of classes.
//
//   IDX  {train,t10k}-images-idx3-ubyte[.gz] and {train,t10k}-labels-idx1-ubyte[.gz]
//        (MNIST's names): images [N, H, W] or [N, H, W, C], labels [N]; any IDX type
//   NPY  {train,test}-images.npy and {train,test}-labels.npy (NumPy's format, C order):
//        images [N, H, W] or [N, H, W, C] of u1/i1/u2/i2/i4/i8/f4/f8, labels [N] of integers
//   CSV  {train,test}.csv: one image per row, "label,v1,...,vD" (a first row that is not
//        numbers is a header): D = H x H values (one channel) or 3 x H x H (red, green, blue
//        for each pixel in turn)
//
// Pixel values v become v / 255 (so 8-bit pixels lie in [0, 1]); the training split then
// gives each channel's mean and standard deviation, and every split is normalized with them:
// x = (v / 255 - mean[c]) / std[c]. Every problem (a missing file, a malformed header, a
// size the file does not hold, labels that disagree with the images, a test split whose
// images differ in shape from the training split's) is a DataError naming the file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/tensor/tensor.h"

namespace weft {

struct ImageSplit {
  Tensor images;                     // [N, C, H, W] float32: v / 255, not normalized yet
  std::vector<std::int32_t> labels;  // N labels, each >= 0
  std::string source;                // the images' file, for messages
};

struct Normalization {
  std::vector<double> mean, stddev;  // one per channel, or one for every channel
};

// "train" or "test" of the folder (any of the layouts above); `limit` > 0 keeps the first
// `limit` samples.
ImageSplit read_image_split(const std::string& dir, const std::string& split, std::int64_t limit = 0);
// Each channel's mean and standard deviation over the split (a constant channel: std 1).
Normalization channel_statistics(const Tensor& images);
// x = (x - mean[c]) / std[c], in place.
void normalize_images(Tensor& images, const Normalization& n);

}  // namespace weft
